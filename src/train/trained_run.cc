#include "keycld/train/trained_run.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "keycld/train/trainer.h"
#include "keycld/util/error.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {

std::string Describe(const std::string& system, int size, int nu, double dt) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s at %dx%d px, %d actuator%s, dt %g s", system.c_str(), size,
                size, nu, nu == 1 ? "" : "s", dt);
  return buf;
}

// The data set a run's config names: relative to the working directory, or else to the folder
// above runs/ (where `keycld run` keeps data/ next to runs/).
fs::path FindDataSet(const fs::path& run_dir, const TrainConfig& config) {
  const fs::path named = config.DataFile();
  if (fs::exists(named)) return named;
  fs::path run = fs::absolute(run_dir).lexically_normal();
  if (run.filename().empty()) run = run.parent_path();  // "runs/x/"
  const fs::path beside = run.parent_path().parent_path() / named;
  if (named.is_relative() && fs::exists(beside)) return beside;
  throw IoError("data set not found: '" + named.string() +
                "' (the run's config names it relative to the folder training ran in; "
                "give --data FILE)");
}

}  // namespace

void SetThreads(int threads) {
  if (threads < 0 || threads > 1024) {
    throw InputError("threads must be in [0, 1024] (0 = every core), got " +
                     std::to_string(threads));
  }
  const int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(n);
  // LibTorch's matrix products go to the system BLAS (libblas.so.3). OpenBLAS, when it provides
  // it, keeps its own thread pool (every core by default): give it the same count, so that
  // `threads` bounds the whole process.
  using SetBlasThreads = void (*)(int);
  if (auto set =
          reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(n);
  }
}

TrainedRun OpenTrainedRun(const TrainedRunOptions& o) {
  if (o.run.empty()) throw InputError("no run folder given");
  if (!fs::exists(o.run)) throw IoError("run folder not found: '" + o.run.string() + "'");
  TrainedRun r;
  fs::path checkpoint = o.checkpoint;
  if (fs::is_directory(o.run)) {
    r.run_dir = o.run;
  } else {
    // A checkpoint file: RUN/checkpoints/NAME.pt.
    if (checkpoint.empty()) checkpoint = o.run;
    r.run_dir = o.run.parent_path();
    if (r.run_dir.filename() == "checkpoints") r.run_dir = r.run_dir.parent_path();
  }
  if (checkpoint.empty()) checkpoint = r.run_dir / "checkpoints" / "last.pt";
  const fs::path config_file = r.run_dir / "config.toml";
  // Without config.toml the defaults stand, if the data set is given.
  if (!fs::exists(config_file) && o.data.empty()) {
    throw IoError("'" + r.run_dir.string() + "' is not a training run folder (no config.toml)");
  }
  if (!fs::exists(checkpoint)) {
    throw IoError("no checkpoint '" + checkpoint.string() + "' (train the run first)");
  }
  r.checkpoint = checkpoint;
  if (fs::exists(config_file)) r.config = TrainConfig::FromToml(config_file);
  SetThreads(o.threads);
  const torch::Device device = ResolveDevice(o.device.empty() ? r.config.device : o.device);
  r.model = LoadModel(checkpoint, device);
  LoadCheckpoint(checkpoint, r.model, nullptr, &r.position);
  r.model->eval();
  // Without the data set, a custom system still needs its file: the description is in it.
  if (!o.open_data && r.model->spec().env != EnvName::kCustom) return r;

  r.data_file = o.data.empty() ? FindDataSet(r.run_dir, r.config) : o.data;
  if (!o.open_data) return r;
  if (!fs::exists(r.data_file)) throw IoError("data set not found: '" + r.data_file.string() + "'");
  r.data.emplace(Dataset::Open(r.data_file));
  const DatasetInfo& info = r.data->info();
  const ModelSpec& spec = r.model->spec();
  if (info.env != spec.env || info.system != spec.SystemName() || info.size != spec.image_size ||
      info.nu != spec.action_dim || std::abs(info.dt - spec.dt) > 1e-9 * std::max(1.0, spec.dt)) {
    throw InputError("data set '" + r.data_file.string() + "' is " +
                     Describe(info.system, info.size, info.nu, info.dt) +
                     ", which does not fit the model '" + checkpoint.string() + "' (" +
                     Describe(spec.SystemName(), spec.image_size, spec.action_dim, spec.dt) + ")");
  }
  return r;
}

}  // namespace keycld
