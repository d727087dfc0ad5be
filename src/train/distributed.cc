#include "keycld/train/distributed.h"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "keycld/util/error.h"
#include "keycld/util/text.h"

namespace keycld {

namespace {

// An environment variable as an integer, or nullopt when unset; InputError when malformed.
std::optional<int> IntegerVariable(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > std::numeric_limits<int>::max()) {
    throw InputError(std::string("environment variable ") + name + "='" + v +
                     "' is not a non-negative integer");
  }
  return int(x);
}

std::string Variable(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::chrono::milliseconds Milliseconds(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000.0));
}

// host and port of "tcp://HOST:PORT" (HOST may be a bracketed IPv6 address).
void ParseTcp(const std::string& url, std::string* host, uint16_t* port) {
  const std::string rest = url.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    throw InputError("--dist-init '" + url + "' is not tcp://HOST:PORT");
  }
  *host = rest.substr(0, colon);
  if (host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  const std::string p = rest.substr(colon + 1);
  char* end = nullptr;
  const long x = std::strtol(p.c_str(), &end, 10);
  if (*end != '\0' || x < 1 || x > 65535) {
    throw InputError("--dist-init '" + url + "': port '" + p + "' is not in [1, 65535]");
  }
  *port = uint16_t(x);
}

// The cause of a c10d or Gloo failure on one line, without LibTorch's backtrace.
std::string Cause(const std::exception& e) {
  std::string what = e.what();
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) what = c->what_without_backtrace();
  const size_t at = what.find("Exception raised from");
  if (at != std::string::npos) what = what.substr(0, at);
  what = OneLine(what);
  while (!what.empty() && (what.back() == ' ' || what.back() == ';')) what.pop_back();
  return what.size() > 300 ? what.substr(0, 300) + "…" : what;
}

// A FileStore's path must be a fresh file or one another rank of this job has begun: c10d's
// FileStore appends to whatever file it is given and waits on it forever if it holds anything
// else (a data set given by mistake would be modified). Its records start with a 32-bit key
// length and the key's characters.
void CheckFileStorePath(const std::string& url, const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path parent = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(parent, ec)) {
    throw InputError("--dist-init '" + url + "': the folder '" + parent.string() +
                     "' does not exist (the store file must be on a file system every rank sees)");
  }
  if (!fs::exists(path, ec)) return;
  if (fs::is_directory(path, ec) || !fs::is_regular_file(path, ec)) {
    throw InputError("--dist-init '" + url + "' names a folder or a special file; give the path " +
                     "of a store file that does not exist yet");
  }
  const auto size = fs::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  uint32_t length = 0;
  in.read(reinterpret_cast<char*>(&length), sizeof length);
  std::string key(std::min<uint32_t>(length, 4096), '\0');
  if (in && length >= 1 && length <= 4096 && uint64_t(length) + 4 <= size) {
    in.read(key.data(), std::streamsize(key.size()));
  }
  const bool printable =
      in && length >= 1 && length <= 4096 &&
      std::all_of(key.begin(), key.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (!printable) {
    throw InputError("--dist-init '" + url + "': '" + path.string() + "' exists and is not a " +
                     "c10d store file (refused: the store would write into it); give the path " +
                     "of a file that does not exist yet");
  }
}

// A duration in seconds as the user wrote it ("3", "1.5").
std::string SecondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

std::optional<DistributedOptions> DistributedFromEnvironment(const std::string& dist_init) {
  DistributedOptions o;
  std::optional<int> rank = IntegerVariable("RANK"), world = IntegerVariable("WORLD_SIZE"),
                     local = IntegerVariable("LOCAL_RANK");
  const char* source = "RANK/WORLD_SIZE";
  if (rank && !world) {
    throw InputError("RANK=" + std::to_string(*rank) +
                     " is set but WORLD_SIZE is not (a launcher "
                     "sets both; unset RANK to train in one process)");
  }
  if (!world) {
    rank = IntegerVariable("SLURM_PROCID");
    world = IntegerVariable("SLURM_NTASKS");
    local = IntegerVariable("SLURM_LOCALID");
    source = "SLURM_PROCID/SLURM_NTASKS";
  }
  if (world && *world == 0) throw InputError(std::string(source) + ": the world size is 0");
  if (world && *world == 1 && rank && *rank != 0) {
    throw InputError(std::string(source) + ": rank " + std::to_string(*rank) +
                     " in a world of size 1");
  }
  if (!world || *world <= 1) {
    if (!dist_init.empty()) {
      throw InputError(
          "--dist-init needs a world size: set RANK and WORLD_SIZE (or launch with "
          "torchrun, srun, or --nproc)");
    }
    return std::nullopt;
  }
  if (!rank) throw InputError(std::string(source) + ": the world size is set but not the rank");
  if (*rank >= *world) {
    throw InputError(std::string(source) + ": rank " + std::to_string(*rank) + " is outside [0, " +
                     std::to_string(*world) + ")");
  }
  o.rank = *rank;
  o.world_size = *world;
  o.local_rank = local.value_or(0);
  if (!dist_init.empty()) {
    o.init = dist_init;
  } else {
    const std::string addr = Variable("MASTER_ADDR"), port = Variable("MASTER_PORT");
    if (addr.empty() || port.empty()) {
      throw InputError(std::string(source) + " describe " + std::to_string(*world) +
                       " ranks but MASTER_ADDR and MASTER_PORT are not set (or give "
                       "--dist-init tcp://HOST:PORT | file:///PATH)");
    }
    o.init = "tcp://" + addr + ":" + port;
  }
  return o;
}

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  std::chrono::milliseconds timeout{0};
};

Communicator::Communicator(const DistributedOptions& options)
    : options_(options), impl_(std::make_unique<Impl>()) {}

Communicator::~Communicator() = default;

std::shared_ptr<Communicator> Communicator::Connect(const DistributedOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw InputError("rank " + std::to_string(o.rank) + " is outside [0, " +
                     std::to_string(o.world_size) + ")");
  }
  if (!(o.timeout_seconds > 0) || o.timeout_seconds > 7 * 24 * 3600.0) {
    throw InputError("--dist-timeout must be in (0, 604800] seconds");
  }
  if (o.backend != "gloo" && o.backend != "nccl") {
    throw InputError("unknown distributed backend '" + o.backend + "' (expected gloo or nccl)");
  }
#ifndef USE_C10D_NCCL
  if (o.backend == "nccl") {
    throw InputError(
        "this LibTorch was built without NCCL: use --dist-backend gloo (it also "
        "averages CUDA gradients, through host memory)");
  }
#endif
  std::shared_ptr<Communicator> c(new Communicator(o));
  Impl& impl = *c->impl_;
  impl.timeout = Milliseconds(o.timeout_seconds);
  const std::string where = "rank " + std::to_string(o.rank) + " of " +
                            std::to_string(o.world_size) + " at " + o.init + ": ";
  std::string host = "127.0.0.1";
  try {
    if (o.init.rfind("tcp://", 0) == 0) {
      uint16_t port = 0;
      ParseTcp(o.init, &host, &port);
      c10d::TCPStoreOptions so;
      so.port = port;
      so.isServer = o.rank == 0;
      so.numWorkers = size_t(o.world_size);
      // The workers are awaited by Gloo's own rendezvous below, under the same timeout: waiting
      // for them here too would double it.
      so.waitWorkers = false;
      so.timeout = impl.timeout;
      impl.store = c10::make_intrusive<c10d::TCPStore>(host, so);
    } else if (o.init.rfind("file://", 0) == 0 && o.init.size() > 7) {
      CheckFileStorePath(o.init, o.init.substr(7));
      impl.store = c10::make_intrusive<c10d::FileStore>(o.init.substr(7), o.world_size);
      impl.store->setTimeout(impl.timeout);
    } else {
      throw InputError("--dist-init '" + o.init + "' is neither tcp://HOST:PORT nor file:///PATH");
    }
    auto store = c10::make_intrusive<c10d::PrefixStore>("keycld", impl.store);
    if (o.backend == "gloo") {
      auto go = c10d::ProcessGroupGloo::Options::create(impl.timeout);
      const std::string ifname = Variable("GLOO_SOCKET_IFNAME");
      if (!ifname.empty()) {
        go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else if (IsLoopback(host) || o.init.rfind("file://", 0) == 0) {
        // All ranks on this machine (a FileStore's ranks may not be, but then GLOO_SOCKET_IFNAME
        // names the interface: docs/distributed.md).
        go->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        go->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      go->threads = 2;
      impl.group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, o.rank, o.world_size, go);
    }
#ifdef USE_C10D_NCCL
    if (o.backend == "nccl") {
      auto no = c10d::ProcessGroupNCCL::Options::create();
      no->timeout = impl.timeout;
      impl.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, o.rank, o.world_size, no);
    }
#endif
  } catch (const keycld::Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string cause = Cause(e);
    const bool timed_out = cause.find("imeout") != std::string::npos;
    throw IoError(where + "could not join the process group: " + cause +
                  (timed_out ? " after " + SecondsText(o.timeout_seconds) +
                                   " (--dist-timeout; are all " + std::to_string(o.world_size) +
                                   " ranks started, with the same rendezvous?" +
                                   (o.init.rfind("file://", 0) == 0
                                        ? " A store file left over from an earlier job blocks "
                                          "it: remove it)"
                                        : std::string(")"))
                             : std::string()));
  }
  return c;
}

namespace {
template <typename F>
void Collective(const DistributedOptions& o, const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    throw IoError("distributed training, rank " + std::to_string(o.rank) + " of " +
                  std::to_string(o.world_size) + ": " + what +
                  " failed (another rank stopped or the connection was lost): " + Cause(e));
  }
}
}  // namespace

torch::Device Communicator::device() const {
  if (options_.backend == "nccl") return torch::Device(torch::kCUDA, int8_t(options_.local_rank));
  return torch::kCPU;
}

void Communicator::AllReduceSum(torch::Tensor& tensor, const char* what) {
  Collective(options_, what, [&] {
    std::vector<at::Tensor> v{tensor};
    impl_->group->allreduce(v)->wait(impl_->timeout);
  });
}

void Communicator::Broadcast(torch::Tensor& tensor, int root, const char* what) {
  Collective(options_, what, [&] {
    std::vector<at::Tensor> v{tensor};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    impl_->group->broadcast(v, bo)->wait(impl_->timeout);
  });
}

void Communicator::Barrier(const char* what) {
  Collective(options_, what, [&] {
    // An all-reduce of one element: Gloo's barrier does not honour the wait timeout everywhere.
    torch::Tensor t = torch::zeros({1}, torch::TensorOptions().device(device()));
    std::vector<at::Tensor> v{t};
    impl_->group->allreduce(v)->wait(impl_->timeout);
  });
}

}  // namespace keycld
