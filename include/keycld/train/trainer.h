// End-to-end unsupervised training of KeyCLD on a data set (docs/method.md §6).
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>

#include "keycld/data/dataset.h"
#include "keycld/data/generate.h"
#include "keycld/models/model.h"
#include "keycld/train/config.h"

namespace keycld {

/// The data set of a training config, found or generated.
struct PreparedDataset {
  std::filesystem::path path;
  bool generated = false;     // written by this call
  GenerateResult generation;  // when generated: time and rate
};

/// Finds the data set `config` names (TrainConfig::DataFile) or, when the file is missing,
/// generates it with the protocol of docs/method.md §7 from [data] env, control, size, runs, frames
/// and seed, with `gl` and a progress bar when `progress` (and stderr is a terminal).
/// Throws InputError (no data set named; a generated set the model could not train on: size
/// not a multiple of 4 or frames < horizon + 2; a [data] file that is not the name keycld
/// generate gives), IoError (a named file missing and no env to generate it) and what
/// GenerateDataset throws.
PreparedDataset PrepareDataset(const TrainConfig& config, GlBackend gl = GlBackend::kAuto,
                               bool progress = true);

class Communicator;  // distributed.h

struct TrainOptions {
  TrainConfig config;
  /// A joined process group (distributed.h) for data-parallel training, or null for one
  /// process. Every rank calls Train with the same config and run_dir; config.batch_sequences
  /// must be a multiple of the world size. Rank 0 alone writes the run folder, so with --resume
  /// the folder must be on a file system every rank sees.
  std::shared_ptr<Communicator> communicator;
  std::filesystem::path run_dir;  // config.toml, checkpoints/, metrics.jsonl
  bool resume = false;            // continue from run_dir/checkpoints/last.pt
  bool progress = true;           // progress bar on a terminal
  bool quiet = false;             // no per-epoch lines on stdout
};

struct TrainSummary {
  int64_t steps = 0;            // optimizer steps in total (including resumed ones)
  int64_t steps_this_call = 0;  // 0: the run was already complete
  int64_t epochs_completed = 0;
  double seconds = 0;           // wall time of this invocation
  double seconds_per_step = 0;  // mean over this invocation's steps
  double last_loss = 0;
  double val_vpt_mean = -1;  // of the last validation (−1 if none ran)
  double val_vpt_median = -1;
  int val_runs = 0;
  std::filesystem::path checkpoint;
};

/// Trains (or resumes) a run. Layout of the run folder:
///   config.toml             the resolved configuration
///   checkpoints/last.pt     after every epoch, at max_steps and on Ctrl-C
///   checkpoints/epoch-NNNN.pt  after every epoch
///   metrics.jsonl           one JSON object per step ("type":"step") and per epoch
///                           ("type":"epoch", with the validation VPT)
/// Without `resume`, a run folder that already holds a checkpoint is refused (InputError), and
/// so is a folder another process is training in (a lock file, run_dir/.lock).
/// With `resume`, the saved config is used (epochs and max_steps may be raised) and training
/// continues exactly where it stopped: same parameters, optimizer state, data order and random
/// augmentation, so the result equals an uninterrupted run.
/// Throws InputError (config, data set of another environment or size), IoError, FormatError
/// (data set or checkpoint), NumericalError (non-finite loss; the last good checkpoint is kept
/// and named in the message), Interrupted (Ctrl-C; a checkpoint was saved first).
TrainSummary Train(const TrainOptions& options);

/// Frames and actions of data-set runs in memory: images uint8 [R, N, H, W, 3], actions float
/// [R, A] (each run's constant action). Throws InputError for a bad run index.
void LoadRuns(const Dataset& data, const std::vector<int64_t>& runs, torch::Tensor* images,
              torch::Tensor* actions);

/// What a run's config.toml records of `config`: with an explicit [data] file, the file's own
/// environment, control mode, size, runs, frames and seed replace the config's (keycld control
/// reads the control mode from config.toml; keycld run compares configs through it).
TrainConfig RecordedConfig(const TrainConfig& config, const DatasetInfo& info);
/// The system part of a model spec for a data set (env, system, K, a custom system's
/// constraints from its description); the rest keeps ModelSpec's defaults.
ModelSpec SpecSystem(const DatasetInfo& info);

/// "cpu", "cuda" or "cuda:N" → a device; InputError for another name or when CUDA is asked
/// for but this LibTorch sees no CUDA device.
torch::Device ResolveDevice(const std::string& name);

}  // namespace keycld
