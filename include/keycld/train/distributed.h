// Data-parallel training across processes and machines on LibTorch's c10d process groups
// (docs/distributed.md): Gloo on CPU, NCCL on CUDA where LibTorch was built with it.
//
// Every rank holds the whole model and data set, trains on its own share of each step's
// sequences, and the gradients are averaged with an all-reduce before clipping and Adam, so the
// parameters stay identical on every rank. Rank 0 writes the run folder.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace keycld {

/// Where and how a rank joins its process group.
struct DistributedOptions {
  int rank = 0;        // 0 … world_size − 1
  int world_size = 1;  // number of ranks
  int local_rank = 0;  // rank on this machine (selects cuda:local_rank when the device is "cuda")
  /// Rendezvous: "tcp://HOST:PORT" (rank 0 serves a c10d TCPStore there) or "file:///PATH"
  /// (a c10d FileStore on a file system all ranks see; the file must not be left over from
  /// another job).
  std::string init;
  std::string backend = "gloo";  // gloo | nccl
  /// Bound on the rendezvous and on every collective: a rank that waits longer stops with an
  /// IoError instead of hanging (a peer that dies is usually noticed at once, by its closed
  /// connection).
  double timeout_seconds = 900;
};

/// The options the launcher's environment gives, or nullopt when it describes one process:
/// RANK, WORLD_SIZE, LOCAL_RANK (torchrun and most launchers) or else SLURM_PROCID,
/// SLURM_NTASKS, SLURM_LOCALID (srun), with `init` = `dist_init` if non-empty, else
/// "tcp://$MASTER_ADDR:$MASTER_PORT". Throws InputError for malformed or inconsistent values
/// (a rank outside [0, world size), a world size without MASTER_ADDR/MASTER_PORT or
/// `dist_init`), or for `dist_init` without a world size.
std::optional<DistributedOptions> DistributedFromEnvironment(const std::string& dist_init = "");

/// A joined process group. All calls are collective: every rank must make them in the same
/// order. Failures (a peer gone, a timeout) throw IoError naming the operation.
class Communicator {
 public:
  /// Joins the group: rendezvous through options.init, then the backend's connections to every
  /// peer. Throws InputError (a malformed init URL, an unknown backend or one this LibTorch lacks,
  /// a rank outside [0, world size)), IoError (the rendezvous failed or timed out).
  static std::shared_ptr<Communicator> Connect(const DistributedOptions& options);
  ~Communicator();

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  int local_rank() const { return options_.local_rank; }
  const DistributedOptions& options() const { return options_; }

  /// Where the collectives' tensors live: the CPU for Gloo, cuda:local_rank for NCCL.
  torch::Device device() const;
  /// In place: `tensor` becomes the sum over the ranks of their `tensor` (same shape and dtype on
  /// every rank, on device()).
  void AllReduceSum(torch::Tensor& tensor, const char* what);
  /// In place: `tensor` becomes rank `root`'s.
  void Broadcast(torch::Tensor& tensor, int root, const char* what);
  /// Returns once every rank has called it.
  void Barrier(const char* what);

 private:
  explicit Communicator(const DistributedOptions& options);
  struct Impl;
  DistributedOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace keycld
