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
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>

#include "keycld/data/dataset.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/loss.h"
#include "keycld/train/metrics.h"
#include "keycld/train/trained_run.h"
#include "keycld/train/vpt.h"
#include "keycld/util/atomic_file.h"
#include "keycld/util/error.h"
#include "keycld/util/interrupt.h"
#include "keycld/util/progress.h"

namespace keycld {

namespace fs = std::filesystem;

namespace {

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

TrainConfig RecordedConfig(const TrainConfig& config, const DatasetInfo& info) {
  TrainConfig recorded = config;
  if (config.data.empty()) return recorded;
  recorded.env = EnvNameString(info.env);
  recorded.control = ControlModeString(info.control);
  recorded.size = info.size;
  recorded.runs = info.runs;
  recorded.frames = info.frames;
  recorded.data_seed = info.seed;
  return recorded;
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

namespace {

// One training invocation (a fresh run or a resumed one), in the order Train runs its steps.
class Trainer {
 public:
  explicit Trainer(const TrainOptions& options)
      : options_(options), cfg_(options.config), device_(torch::kCPU) {}

  TrainSummary Run() {
    OpenRunFolder();
    OpenData();
    BuildModel();
    Restore();
    RecordConfig();
    return Loop();
  }

 private:
  // --out exists and is locked (one process per run folder: a second one would interleave
  // checkpoints and configs); it holds a run exactly when resuming.
  void OpenRunFolder() {
    cfg_.Validate();
    run_ = options_.run_dir;
    if (run_.empty()) throw InputError("--out must name a run folder");
    std::error_code ec;
    fs::create_directories(run_, ec);
    if (ec) throw IoError("cannot create run folder '" + run_.string() + "': " + ec.message());
    lock_ = std::make_unique<RunLock>(run_ / ".lock");
    checkpoints_ = run_ / "checkpoints";
    last_ = checkpoints_ / "last.pt";
    if (options_.resume && !fs::exists(last_)) {
      throw InputError("nothing to resume: '" + last_.string() + "' does not exist");
    }
    if (!options_.resume && fs::exists(last_)) {
      throw InputError("'" + run_.string() + "' already holds a training run: pass --resume to " +
                       "continue it, or choose another --out");
    }
  }

  // The data set, checked against the config and the model, and its runs in memory: the
  // training runs and the validation subset of the per-epoch VPT.
  void OpenData() {
    const fs::path file = cfg_.DataFile();
    data_.emplace(Dataset::Open(file));
    const DatasetInfo& info = data_->info();
    if (!cfg_.env.empty() && ParseEnvName(cfg_.env) != info.env) {
      throw InputError("the config is for " + cfg_.env + " but '" + file.string() + "' is a " +
                       EnvNameString(info.env) + " data set");
    }
    if (info.size % 4 != 0) {
      throw InputError("'" + file.string() + "' has " + std::to_string(info.size) +
                       " px images; the U-Net needs a multiple of 4");
    }
    if (info.frames < cfg_.horizon + 2) {
      throw InputError("'" + file.string() + "' has " + std::to_string(info.frames) +
                       " frames per run; horizon " + std::to_string(cfg_.horizon) + " needs ≥ " +
                       std::to_string(cfg_.horizon + 2));
    }
    if (info.train_runs < 1) throw InputError("'" + file.string() + "' has no training runs");
    LoadRuns(*data_, data_->TrainRuns(), &train_images_, &train_actions_);
    val_runs_ = data_->ValidationRuns();
    if (cfg_.val_runs > 0 && int64_t(val_runs_.size()) > cfg_.val_runs) {
      val_runs_.resize(size_t(cfg_.val_runs));
    }
    if (!val_runs_.empty()) LoadRuns(*data_, val_runs_, &val_images_, &val_actions_);
    R_ = train_images_.size(0);
  }

  // Threads, device, the seeded model and Adam with the perception and dynamics groups (§6).
  void BuildModel() {
    const DatasetInfo& info = data_->info();
    SetThreads(cfg_.threads);
    device_ = ResolveDevice(cfg_.device);
    torch::manual_seed(cfg_.seed);
    ModelSpec spec;
    spec.env = info.env;
    spec.num_keypoints = KeypointCount(info.env);
    spec.action_dim = info.nu;
    spec.hidden = cfg_.hidden;
    spec.image_size = info.size;
    spec.sigma = cfg_.sigma;
    spec.dt = info.dt;
    spec.model = cfg_.model;
    model_ = CreateModel(spec);
    model_->to(device_);
    model_->SetPrecision(ParsePrecision(cfg_.precision));
    if (!options_.quiet) {
      std::printf("%s %s%s on %s\n", options_.resume ? "resuming" : "training",
                  DescribeModel(spec).c_str(),
                  model_->precision() == Precision::kBfloat16 ? " (bf16 convolutions)" : "",
                  data_->path().c_str());
      std::fflush(stdout);
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(model_->PerceptionParameters(),
                        std::make_unique<torch::optim::AdamOptions>(cfg_.lr));
    groups.emplace_back(model_->DynamicsParameters(), std::make_unique<torch::optim::AdamOptions>(
                                                          cfg_.lr * cfg_.dynamics_lr_scale));
    adam_ =
        std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(cfg_.lr));
  }

  // Learning rates of both groups at `factor` × the config's (the schedule's value).
  void SetLearningRates(double factor) {
    auto& g = adam_->param_groups();
    static_cast<torch::optim::AdamOptions&>(g[0].options()).lr(cfg_.lr * factor);
    static_cast<torch::optim::AdamOptions&>(g[1].options())
        .lr(cfg_.lr * cfg_.dynamics_lr_scale * factor);
  }

  // The random stream, and on --resume the saved parameters, optimizer state, position and
  // stream; learning rates follow the config (so a run can resume with a lower --lr).
  void Restore() {
    rng_.seed(cfg_.seed ^ 0x6b6579636c64ULL);  // stream "keycld"
    if (!options_.resume) return;
    LoadCheckpoint(last_, model_, adam_.get(), &pos_);
    std::istringstream(pos_.rng_state) >> rng_;
    SetLearningRates(1.0);
    if (!pos_.order.empty() && int64_t(pos_.order.size()) != R_) {
      throw FormatError("'" + last_.string() + "' was trained on a data set with " +
                        std::to_string(pos_.order.size()) + " training runs, this one has " +
                        std::to_string(R_));
    }
  }

  // config.toml and the checkpoints' config record what the run was trained on: with an
  // explicit [data] file, the environment, control mode, size, runs, frames and seed come from
  // the file (keycld control reads the control mode from config.toml). Opens metrics.jsonl.
  void RecordConfig() {
    fs::create_directories(checkpoints_);
    const TrainConfig recorded = RecordedConfig(cfg_, data_->info());
    WriteTextAtomically(run_ / "config.toml", recorded.ToToml());
    pos_.config_toml = recorded.ToToml();
    metrics_ =
        std::make_unique<MetricsWriter>(run_ / "metrics.jsonl", options_.resume ? pos_.step : -1);
  }

  // The metrics go to disk before the checkpoint, so that every checkpoint's records are on
  // disk (a resume drops the records after the checkpoint, never the ones before it).
  void Save(const fs::path& file) {
    metrics_->Flush();
    std::ostringstream s;
    s << rng_;
    pos_.rng_state = s.str();
    SaveCheckpoint(file, model_, adam_.get(), pos_);
  }

  // The epochs from the saved position on, until cfg.epochs or max_steps.
  TrainSummary Loop() {
    InterruptGuard interrupt_guard;
    start_ = std::chrono::steady_clock::now();
    const int64_t first_step = pos_.step;
    saved_once_ = options_.resume;
    model_->train();
    if (options_.resume) FinishEpochEnd();
    while (pos_.epoch < cfg_.epochs) {
      if (pos_.order.empty()) pos_.order = Shuffled(R_, rng_);
      ProgressBar bar("epoch " + std::to_string(pos_.epoch + 1) + "/" + std::to_string(cfg_.epochs),
                      R_, "steps", options_.progress && ::isatty(2));
      bool stopped = false;
      while (pos_.step_in_epoch < R_) {
        if (cfg_.max_steps > 0 && pos_.step >= cfg_.max_steps) {
          stopped = true;
          break;
        }
        const StepRecord r = Step();
        char suffix[96];
        std::snprintf(suffix, sizeof suffix, "loss %.4g (rec %.3g dyn %.3g bce %.3g)", r.loss,
                      r.rec, r.dyn, r.bce);
        bar.Update(pos_.step_in_epoch, suffix);
      }
      if (stopped) break;
      EndEpoch(bar);
    }
    if (pos_.step_in_epoch > 0 || !saved_once_) Save(last_);
    metrics_->Flush();  // the records after the last save (none if it just saved)
    summary_.steps = pos_.step;
    summary_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int64_t done = pos_.step - first_step;
    summary_.seconds_per_step = done > 0 ? step_seconds_ / double(done) : 0;
    summary_.steps_this_call = done;
    summary_.checkpoint = last_;
    return summary_;
  }

  // One optimizer step on the next training run of the epoch's order (§6), recorded.
  StepRecord Step() {
    if (InterruptRequested()) {
      Save(last_);
      throw Interrupted("training interrupted at step " + std::to_string(pos_.step) + "; saved " +
                        last_.string() + " (continue with --resume)");
    }
    const auto step_start = std::chrono::steady_clock::now();
    const int64_t r = pos_.order[size_t(pos_.step_in_epoch)];
    torch::Tensor images = ImagesToFloat(train_images_[r], device_);
    torch::Tensor ids;
    if (cfg_.AugmentAt(pos_.step, R_)) {
      std::vector<int64_t> draws(size_t(data_->info().frames));
      for (auto& d : draws) d = int64_t(rng_() % 8);
      ids = torch::tensor(draws, torch::kInt64);
    }
    torch::Tensor u = train_actions_[r].to(device_);
    LossOptions lo;
    lo.horizon = cfg_.horizon;
    lo.w_rec = cfg_.w_rec;
    lo.w_bce = cfg_.w_bce;
    lo.max_acceleration = cfg_.max_acceleration;
    lo.integrator = cfg_.IntegratorAt(pos_.step, R_);
    lo.substeps = cfg_.SubstepsAt(pos_.step, R_);
    lo.w_dyn = cfg_.WDynAt(pos_.step, R_);
    LossTerms loss;
    try {
      loss = SequenceLoss(model_, images, u, ids, lo);
    } catch (const c10::Error& e) {
      // LibTorch's own checks on non-finite values (e.g. a singular solve of the constraint
      // forces once the masses overflow) are the same failure as a non-finite loss.
      throw NumericalError(Diverged(std::string(e.what_without_backtrace()).substr(0, 120)));
    }
    const double total = loss.total.item<double>();
    if (!std::isfinite(total)) throw NumericalError(Diverged("non-finite loss"));
    adam_->zero_grad();
    loss.total.backward();
    for (auto& p : model_->parameters()) {
      if (p.grad().defined()) p.grad().clamp_(-cfg_.grad_clip, cfg_.grad_clip);
    }
    const double lr_factor = cfg_.LearningRateFactor(pos_.step, cfg_.TotalSteps(R_));
    SetLearningRates(lr_factor);
    adam_->step();
    ++pos_.step;
    ++pos_.step_in_epoch;
    StepRecord rec;
    rec.step = pos_.step;
    rec.epoch = pos_.epoch + 1;
    rec.loss = total;
    rec.rec = loss.reconstruction.item<double>();
    rec.dyn = loss.dynamics.item<double>();
    rec.bce = loss.heatmap.item<double>();
    rec.lr = cfg_.lr * lr_factor;
    rec.w_dyn = lo.w_dyn;
    rec.integrator = IntegratorMethodString(lo.integrator);
    rec.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    metrics_->Append(rec);
    summary_.last_loss = total;
    step_seconds_ += rec.seconds;
    return rec;
  }

  // The message of a diverged step: what failed, where, and what is kept.
  std::string Diverged(const std::string& what) const {
    std::string first_line = what.substr(0, what.find('\n'));
    return first_line + " at step " + std::to_string(pos_.step) + " (epoch " +
           std::to_string(pos_.epoch + 1) + "); " +
           (saved_once_ ? "the last good checkpoint is kept: " + last_.string() +
                              " (resume with --resume, perhaps with a lower --lr)"
                        : std::string("no checkpoint was saved yet (try a lower --lr)"));
  }

  fs::path EpochFile(int64_t epoch) const {
    char name[32];
    std::snprintf(name, sizeof name, "epoch-%04lld.pt", static_cast<long long>(epoch));
    return checkpoints_ / name;
  }

  // The validation VPT of the epoch that just ended, appended to metrics.jsonl.
  EpochRecord RecordEpoch() {
    EpochRecord rec;
    rec.epoch = pos_.epoch;
    rec.step = pos_.step;
    Validate(&rec);
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_->Append(rec);
    metrics_->Flush();
    return rec;
  }

  // A run killed after an epoch's checkpoint but before its copy or its record (during the
  // validation) resumes at that epoch's end: what is missing is made now, so that every epoch
  // has its epoch-NNNN.pt and exactly one record.
  void FinishEpochEnd() {
    if (pos_.step_in_epoch != 0 || pos_.epoch < 1) return;
    if (!fs::exists(EpochFile(pos_.epoch))) CopyFileAtomically(last_, EpochFile(pos_.epoch));
    for (const EpochRecord& e : ReadMetrics(run_ / "metrics.jsonl").epochs) {
      if (e.epoch == pos_.epoch) return;
    }
    RecordEpoch();
  }

  // End of an epoch: checkpoints (last.pt and epoch-NNNN.pt), the validation VPT, the record.
  void EndEpoch(ProgressBar& bar) {
    pos_.epoch += 1;
    pos_.step_in_epoch = 0;
    pos_.order.clear();
    Save(last_);
    CopyFileAtomically(last_, EpochFile(pos_.epoch));
    saved_once_ = true;
    summary_.epochs_completed = pos_.epoch;
    const EpochRecord rec = RecordEpoch();
    if (options_.quiet) return;
    bar.Finish();
    char vpt[64] = "n/a";
    if (rec.vpt_mean) {
      std::snprintf(vpt, sizeof vpt, "%.2f frames (%zu runs)", *rec.vpt_mean, val_runs_.size());
    }
    std::printf("epoch %lld/%d: loss %.4g, validation VPT %s, %s elapsed\n",
                static_cast<long long>(pos_.epoch), cfg_.epochs, summary_.last_loss, vpt,
                FormatDuration(rec.seconds).c_str());
    std::fflush(stdout);
  }

  // The VPT over the validation subset (§8), in float32 like `keycld evaluate` whatever the
  // training precision; a diverged rollout is recorded as the epoch's val_error.
  void Validate(EpochRecord* rec) {
    if (!val_images_.defined()) return;
    VptOptions vo;
    vo.epsilon = data_->info().vpt_epsilon;
    vo.rtol = cfg_.rtol;
    vo.atol = cfg_.atol;
    const Precision training_precision = model_->precision();
    try {
      model_->SetPrecision(Precision::kFloat32);
      VptResult v = ValidPredictionTime(model_, val_images_, val_actions_, vo);
      model_->SetPrecision(training_precision);
      summary_.val_vpt_mean = v.mean;
      summary_.val_vpt_median = v.median;
      summary_.val_runs = int(v.vpt.size());
      rec->vpt_mean = v.mean;
      rec->vpt_std = v.std;
      rec->vpt_median = v.median;
      rec->val_runs = int64_t(v.vpt.size());
      rec->dopri5_steps = v.accepted_steps;
    } catch (const NumericalError& e) {
      model_->SetPrecision(training_precision);
      rec->val_error = e.what();
    } catch (const Interrupted&) {
      // Ctrl-C during the validation: the epoch's record is still written; the next step
      // stops the run (Step).
      model_->SetPrecision(training_precision);
      rec->val_error = "validation interrupted";
    } catch (...) {
      model_->SetPrecision(training_precision);
      throw;
    }
  }

  const TrainOptions& options_;
  const TrainConfig& cfg_;
  fs::path run_, checkpoints_, last_;
  std::unique_ptr<RunLock> lock_;
  std::optional<Dataset> data_;
  std::vector<int64_t> val_runs_;
  torch::Tensor train_images_, train_actions_, val_images_, val_actions_;
  int64_t R_ = 0;
  torch::Device device_;
  Model model_{nullptr};
  std::unique_ptr<torch::optim::Adam> adam_;
  std::mt19937_64 rng_;
  TrainPosition pos_;
  std::unique_ptr<MetricsWriter> metrics_;
  TrainSummary summary_;
  std::chrono::steady_clock::time_point start_;
  double step_seconds_ = 0;
  bool saved_once_ = false;
};

}  // namespace

TrainSummary Train(const TrainOptions& options) { return Trainer(options).Run(); }

}  // namespace keycld
