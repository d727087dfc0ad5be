#include "keycld/train/trainer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "keycld/data/dataset.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/loss.h"
#include "keycld/train/vpt.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"

namespace keycld {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Keeps the metrics lines that precede `position` (a resumed run rewrites what follows).
void TruncateMetrics(const fs::path& file, const TrainPosition& position) {
  if (!fs::exists(file)) return;
  std::ifstream in(file);
  std::string line, kept;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;
    bool keep = j.value("type", "") == "step" ? j.value("step", int64_t(0)) <= position.step
                                              : j.value("epoch", int64_t(0)) < position.epoch;
    if (keep) kept += line + "\n";
  }
  WriteTextAtomically(file, kept);
}

std::vector<int64_t> Shuffled(int64_t n, std::mt19937_64& rng) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // Fisher–Yates with explicit 64-bit draws: the same order on every platform.
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng() % uint64_t(i + 1)]);
  return order;
}

// An exclusive flock(2) on a file in the run folder, released when the process ends.
class RunLock {
 public:
  explicit RunLock(const fs::path& file) {
    fd_ = ::open(file.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd_ < 0) throw IoError("cannot create '" + file.string() + "': " + std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw InputError("'" + file.parent_path().string() + "' is in use by another keycld process");
    }
  }
  ~RunLock() { ::close(fd_); }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_;
};

}  // namespace

void LoadRuns(const Dataset& data, const std::vector<int64_t>& runs, torch::Tensor* images,
              torch::Tensor* actions) {
  const DatasetInfo& info = data.info();
  const int64_t N = info.frames, S = info.size;
  *images = torch::empty({int64_t(runs.size()), N, S, S, 3}, torch::kUInt8);
  *actions = torch::empty({int64_t(runs.size()), info.nu}, torch::kFloat32);
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<uint8_t> img = data.ReadImages(int(runs[i]));
    std::memcpy((*images)[int64_t(i)].data_ptr(), img.data(), img.size());
    std::vector<double> u = data.ReadAction(int(runs[i]));  // [frames, nu], constant
    for (int a = 0; a < info.nu; ++a) (*actions)[int64_t(i)][a] = float(u[size_t(a)]);
  }
}

torch::Device ResolveDevice(const std::string& name) {
  torch::Device device(torch::kCPU);
  try {
    device = torch::Device(name);
  } catch (const c10::Error&) {
    throw InputError("unknown device '" + name + "' (expected cpu, cuda or cuda:N)");
  }
  if (device.is_cuda() && !torch::cuda::is_available()) {
    throw InputError("device '" + name + "' requested, but this LibTorch sees no CUDA device " +
                     "(a CUDA build of LibTorch and a GPU are needed)");
  }
  return device;
}

PreparedDataset PrepareDataset(const TrainConfig& config, GlBackend gl, bool progress) {
  PreparedDataset out;
  out.path = config.DataFile();
  if (config.data.empty() && (config.size % 4 != 0 || config.frames < config.horizon + 2)) {
    throw InputError("[data] size must be a multiple of 4 and frames ≥ horizon + 2 = " +
                     std::to_string(config.horizon + 2) + " to train on the data set");
  }
  if (fs::exists(out.path)) return out;
  if (!config.data.empty() && config.env.empty()) {
    throw IoError("data set not found: '" + out.path.string() + "'");
  }
  GenerateOptions g;
  g.env = ParseEnvName(config.env);
  g.control = ParseControlMode(config.control);
  g.size = config.size;
  g.runs = config.runs;
  g.frames = config.frames;
  g.seed = config.data_seed;
  g.out_dir = out.path.parent_path().empty() ? fs::path(".") : out.path.parent_path();
  g.gl = gl;
  g.progress = progress;
  if (DatasetPath(g).lexically_normal() != out.path.lexically_normal()) {
    throw InputError("[data] file '" + out.path.string() + "' does not exist and is not " +
                     "the name keycld generate gives ('" + DatasetPath(g).string() + "')");
  }
  out.generation = GenerateDataset(g);
  out.generated = true;
  return out;
}

TrainSummary Train(const TrainOptions& options) {
  const TrainConfig& cfg = options.config;
  cfg.Validate();
  const fs::path run = options.run_dir;
  if (run.empty()) throw InputError("--out must name a run folder");
  {
    std::error_code ec;
    fs::create_directories(run, ec);
    if (ec) throw IoError("cannot create run folder '" + run.string() + "': " + ec.message());
  }
  // One process per run folder: a second one would interleave checkpoints and configs.
  RunLock lock(run / ".lock");
  const fs::path checkpoints = run / "checkpoints";
  const fs::path last = checkpoints / "last.pt";
  if (options.resume && !fs::exists(last)) {
    throw InputError("nothing to resume: '" + last.string() + "' does not exist");
  }
  if (!options.resume && fs::exists(last)) {
    throw InputError("'" + run.string() + "' already holds a training run: pass --resume to " +
                     "continue it, or choose another --out");
  }

  const fs::path data_file = cfg.DataFile();
  Dataset data = Dataset::Open(data_file);
  const DatasetInfo& info = data.info();
  if (!cfg.env.empty() && ParseEnvName(cfg.env) != info.env) {
    throw InputError("the config is for " + cfg.env + " but '" + data_file.string() + "' is a " +
                     EnvNameString(info.env) + " data set");
  }
  if (info.size % 4 != 0) {
    throw InputError("'" + data_file.string() + "' has " + std::to_string(info.size) +
                     " px images; the U-Net needs a multiple of 4");
  }
  if (info.frames < cfg.horizon + 2) {
    throw InputError("'" + data_file.string() + "' has " + std::to_string(info.frames) +
                     " frames per run; horizon " + std::to_string(cfg.horizon) + " needs ≥ " +
                     std::to_string(cfg.horizon + 2));
  }
  if (info.train_runs < 1) throw InputError("'" + data_file.string() + "' has no training runs");

  const int threads =
      cfg.threads > 0 ? cfg.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
  const torch::Device device = ResolveDevice(cfg.device);

  torch::manual_seed(cfg.seed);
  ModelSpec spec;
  spec.env = info.env;
  spec.num_keypoints = KeypointCount(info.env);
  spec.action_dim = info.nu;
  spec.hidden = cfg.hidden;
  spec.image_size = info.size;
  spec.sigma = cfg.sigma;
  spec.dt = info.dt;
  spec.model = cfg.model;
  Model model = CreateModel(spec);
  model->to(device);
  model->SetPrecision(ParsePrecision(cfg.precision));
  if (!options.quiet) {
    std::printf("%s %s%s on %s\n", options.resume ? "resuming" : "training",
                DescribeModel(spec).c_str(),
                model->precision() == Precision::kBfloat16 ? " (bf16 convolutions)" : "",
                data_file.c_str());
    std::fflush(stdout);
  }

  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(model->PerceptionParameters(),
                      std::make_unique<torch::optim::AdamOptions>(cfg.lr));
  groups.emplace_back(model->DynamicsParameters(),
                      std::make_unique<torch::optim::AdamOptions>(cfg.lr * cfg.dynamics_lr_scale));
  torch::optim::Adam adam(std::move(groups), torch::optim::AdamOptions(cfg.lr));

  // The training runs in memory (uint8), and the validation subset for the per-epoch VPT.
  torch::Tensor train_images, train_actions, val_images, val_actions;
  LoadRuns(data, data.TrainRuns(), &train_images, &train_actions);
  std::vector<int64_t> val_runs = data.ValidationRuns();
  if (cfg.val_runs > 0 && int64_t(val_runs.size()) > cfg.val_runs) val_runs.resize(cfg.val_runs);
  if (!val_runs.empty()) LoadRuns(data, val_runs, &val_images, &val_actions);
  const int64_t R = train_images.size(0);

  std::mt19937_64 rng(cfg.seed ^ 0x6b6579636c64ULL);  // stream "keycld"
  TrainPosition pos;
  if (options.resume) {
    LoadCheckpoint(last, model, &adam, &pos);
    std::istringstream(pos.rng_state) >> rng;
    // Learning rates follow the config (so a run can resume with a lower --lr).
    auto& g = adam.param_groups();
    static_cast<torch::optim::AdamOptions&>(g[0].options()).lr(cfg.lr);
    static_cast<torch::optim::AdamOptions&>(g[1].options()).lr(cfg.lr * cfg.dynamics_lr_scale);
    if (!pos.order.empty() && int64_t(pos.order.size()) != R) {
      throw FormatError("'" + last.string() + "' was trained on a data set with " +
                        std::to_string(pos.order.size()) + " training runs, this one has " +
                        std::to_string(R));
    }
  }
  fs::create_directories(checkpoints);
  // The run records what it was trained on: with an explicit [data] file, the environment,
  // control mode, size, runs, frames and seed come from the file (keycld control reads the
  // control mode from config.toml).
  TrainConfig recorded = cfg;
  if (!cfg.data.empty()) {
    recorded.env = EnvNameString(info.env);
    recorded.control = ControlModeString(info.control);
    recorded.size = info.size;
    recorded.runs = info.runs;
    recorded.frames = info.frames;
    recorded.data_seed = info.seed;
  }
  WriteTextAtomically(run / "config.toml", recorded.ToToml());
  pos.config_toml = recorded.ToToml();
  const fs::path metrics_file = run / "metrics.jsonl";
  if (options.resume) {
    TruncateMetrics(metrics_file, pos);
  } else {
    WriteTextAtomically(metrics_file, "");
  }
  std::ofstream metrics(metrics_file, std::ios::app);

  InterruptGuard interrupt_guard;
  auto save = [&](const fs::path& file) {
    std::ostringstream s;
    s << rng;
    pos.rng_state = s.str();
    SaveCheckpoint(file, model, &adam, pos);
  };

  LossOptions loss_options;
  loss_options.horizon = cfg.horizon;
  loss_options.w_rec = cfg.w_rec;
  loss_options.w_bce = cfg.w_bce;
  loss_options.max_acceleration = cfg.max_acceleration;
  const int64_t total_steps = cfg.TotalSteps(R);
  TrainSummary summary;
  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = pos.step;
  double step_seconds = 0;
  bool saved_once = options.resume;
  model->train();

  while (pos.epoch < cfg.epochs) {
    if (pos.order.empty()) pos.order = Shuffled(R, rng);
    ProgressBar bar("epoch " + std::to_string(pos.epoch + 1) + "/" + std::to_string(cfg.epochs), R,
                    "steps", options.progress && ::isatty(2));
    bool stop = false;
    while (pos.step_in_epoch < R) {
      if (cfg.max_steps > 0 && pos.step >= cfg.max_steps) {
        stop = true;
        break;
      }
      if (InterruptRequested()) {
        save(last);
        throw Interrupted("training interrupted at step " + std::to_string(pos.step) + "; saved " +
                          last.string() + " (continue with --resume)");
      }
      const auto step_start = std::chrono::steady_clock::now();
      const int64_t r = pos.order[size_t(pos.step_in_epoch)];
      torch::Tensor images = ImagesToFloat(train_images[r], device);
      torch::Tensor ids;
      if (cfg.AugmentAt(pos.step, R)) {
        std::vector<int64_t> draws(size_t(info.frames));
        for (auto& d : draws) d = int64_t(rng() % 8);
        ids = torch::tensor(draws, torch::kInt64);
      }
      torch::Tensor u = train_actions[r].to(device);
      loss_options.integrator = cfg.IntegratorAt(pos.step, R);
      loss_options.substeps = cfg.SubstepsAt(pos.step, R);
      loss_options.w_dyn = cfg.WDynAt(pos.step, R);
      LossTerms loss = SequenceLoss(model, images, u, ids, loss_options);
      const double total = loss.total.item<double>();
      if (!std::isfinite(total)) {
        throw NumericalError("non-finite loss at step " + std::to_string(pos.step) + " (epoch " +
                             std::to_string(pos.epoch + 1) + "); " +
                             (saved_once
                                  ? "the last good checkpoint is kept: " + last.string() +
                                        " (resume with --resume, perhaps with a lower --lr)"
                                  : std::string("no checkpoint was saved yet (try a lower --lr)")));
      }
      adam.zero_grad();
      loss.total.backward();
      for (auto& p : model->parameters()) {
        if (p.grad().defined()) p.grad().clamp_(-cfg.grad_clip, cfg.grad_clip);
      }
      const double lr_factor = cfg.LearningRateFactor(pos.step, total_steps);
      auto& groups = adam.param_groups();
      static_cast<torch::optim::AdamOptions&>(groups[0].options()).lr(cfg.lr * lr_factor);
      static_cast<torch::optim::AdamOptions&>(groups[1].options())
          .lr(cfg.lr * cfg.dynamics_lr_scale * lr_factor);
      adam.step();
      ++pos.step;
      ++pos.step_in_epoch;
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      json line = {{"type", "step"},
                   {"step", pos.step},
                   {"epoch", pos.epoch + 1},
                   {"loss", total},
                   {"rec", loss.reconstruction.item<double>()},
                   {"dyn", loss.dynamics.item<double>()},
                   {"bce", loss.heatmap.item<double>()},
                   {"lr", cfg.lr * lr_factor},
                   {"w_dyn", loss_options.w_dyn},
                   {"integrator", IntegratorMethodString(loss_options.integrator)},
                   {"seconds", secs}};
      metrics << line.dump() << "\n";
      summary.last_loss = total;
      char suffix[96];
      std::snprintf(suffix, sizeof suffix, "loss %.4g (rec %.3g dyn %.3g bce %.3g)", total,
                    line["rec"].get<double>(), line["dyn"].get<double>(),
                    line["bce"].get<double>());
      step_seconds += secs;
      bar.Update(pos.step_in_epoch, suffix);
    }
    if (stop) break;
    metrics.flush();
    // End of the epoch: checkpoint, then the validation VPT.
    const int64_t finished_epoch = pos.epoch + 1;
    pos.epoch += 1;
    pos.step_in_epoch = 0;
    pos.order.clear();
    save(last);
    char name[32];
    std::snprintf(name, sizeof name, "epoch-%04lld.pt", static_cast<long long>(finished_epoch));
    fs::copy_file(last, checkpoints / name, fs::copy_options::overwrite_existing);
    saved_once = true;
    summary.epochs_completed = finished_epoch;
    json epoch_line = {{"type", "epoch"}, {"epoch", finished_epoch}, {"step", pos.step}};
    if (val_images.defined()) {
      VptOptions vo;
      vo.epsilon = info.vpt_epsilon;
      vo.rtol = cfg.rtol;
      vo.atol = cfg.atol;
      try {
        // Validation in float32, like `keycld evaluate`, whatever the training precision.
        const Precision training_precision = model->precision();
        model->SetPrecision(Precision::kFloat32);
        VptResult v;
        try {
          v = ValidPredictionTime(model, val_images, val_actions, vo);
        } catch (...) {
          model->SetPrecision(training_precision);
          throw;
        }
        model->SetPrecision(training_precision);
        summary.val_vpt_mean = v.mean;
        summary.val_vpt_median = v.median;
        summary.val_runs = int(v.vpt.size());
        epoch_line["val_vpt_mean"] = v.mean;
        epoch_line["val_vpt_std"] = v.std;
        epoch_line["val_vpt_median"] = v.median;
        epoch_line["val_runs"] = v.vpt.size();
        epoch_line["dopri5_steps"] = v.accepted_steps;
      } catch (const NumericalError& e) {
        epoch_line["val_error"] = e.what();
      }
    }
    epoch_line["seconds"] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    metrics << epoch_line.dump() << "\n";
    metrics.flush();
    if (!options.quiet) {
      bar.Finish();
      char vpt[64] = "n/a";
      if (epoch_line.contains("val_vpt_mean")) {
        std::snprintf(vpt, sizeof vpt, "%.2f frames (%zu runs)", summary.val_vpt_mean,
                      val_runs.size());
      }
      std::printf("epoch %lld/%d: loss %.4g, validation VPT %s, %s elapsed\n",
                  static_cast<long long>(finished_epoch), cfg.epochs, summary.last_loss, vpt,
                  FormatDuration(epoch_line["seconds"].get<double>()).c_str());
      std::fflush(stdout);
    }
  }
  if (pos.step_in_epoch > 0 || !saved_once) save(last);
  metrics.flush();
  summary.steps = pos.step;
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t done = pos.step - first_step;
  summary.seconds_per_step = done > 0 ? step_seconds / double(done) : 0;
  summary.steps_this_call = done;
  summary.checkpoint = last;
  return summary;
}

}  // namespace keycld
