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
#include "keycld/train/distributed.h"
#include "keycld/train/loss.h"
#include "keycld/train/metrics.h"
#include "keycld/train/relabel.h"
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

ModelSpec SpecSystem(const DatasetInfo& info) {
  ModelSpec spec;
  spec.env = info.env;
  spec.system = info.system;
  if (info.env == EnvName::kCustom) {
    const SystemDescription system = DatasetSystem(info);
    spec.num_keypoints = system.num_keypoints();
    spec.constraints = system.ConstraintTerms();
  } else {
    spec.num_keypoints = KeypointCount(info.env);
  }
  return spec;
}

TrainConfig RecordedConfig(const TrainConfig& config, const DatasetInfo& info) {
  TrainConfig recorded = config;
  if (config.data.empty()) return recorded;
  // A custom system is known by its data set alone (its description travels in the file).
  recorded.env = info.env == EnvName::kCustom ? "" : EnvNameString(info.env);
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
  if (config.data.empty() && (config.size % 4 != 0 || config.frames < config.MaxHorizon() + 2)) {
    throw InputError("[data] size must be a multiple of 4 and frames ≥ horizon + 2 = " +
                     std::to_string(config.MaxHorizon() + 2) + " to train on the data set");
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
      : options_(options), cfg_(options.config), comm_(options.communicator), device_(torch::kCPU) {
    if (comm_) {
      rank_ = comm_->rank();
      world_ = comm_->world_size();
    }
  }

  TrainSummary Run() {
    OpenRunFolder();
    try {
      OpenData();
      BuildModel();
      Restore();
      if (world_ > 1) Handshake();
      RecordConfig();
    } catch (...) {
      // Refused before anything was written: a folder this call made goes again.
      if (created_run_folder_) {
        lock_.reset();
        std::error_code ec;
        fs::remove(run_ / ".lock", ec);
        fs::remove(run_, ec);  // only if empty
      }
      throw;
    }
    return Loop();
  }

 private:
  // Rank 0 writes the run folder (config, checkpoints, metrics) and validates; every rank of a
  // distributed run reads the data set and, on resume, the checkpoint.
  bool Leader() const { return rank_ == 0; }
  // --out exists and is locked (one process per run folder: a second one would interleave
  // checkpoints and configs); it holds a run exactly when resuming.
  void OpenRunFolder() {
    cfg_.Validate();
    run_ = options_.run_dir;
    if (run_.empty()) throw InputError("--out must name a run folder");
    checkpoints_ = run_ / "checkpoints";
    last_ = checkpoints_ / "last.pt";
    if (!Leader()) {
      if (options_.resume && !fs::exists(last_)) {
        throw InputError("rank " + std::to_string(rank_) + ": nothing to resume: '" +
                         last_.string() + "' does not exist (the run folder must be on a file " +
                         "system every rank sees)");
      }
      return;
    }
    std::error_code ec;
    created_run_folder_ = !fs::exists(run_);
    fs::create_directories(run_, ec);
    if (ec) throw IoError("cannot create run folder '" + run_.string() + "': " + ec.message());
    lock_ = std::make_unique<RunLock>(run_ / ".lock");
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
      throw InputError("the config is for " + cfg_.env + " but '" + file.string() +
                       "' holds " + info.system + " data");
    }
    if (info.size % 4 != 0) {
      throw InputError("'" + file.string() + "' has " + std::to_string(info.size) +
                       " px images; the U-Net needs a multiple of 4");
    }
    if (info.frames < cfg_.MaxHorizon() + 2) {
      throw InputError("'" + file.string() + "' has " + std::to_string(info.frames) +
                       " frames per run; horizon " + std::to_string(cfg_.MaxHorizon()) + " needs ≥ " +
                       std::to_string(cfg_.MaxHorizon() + 2));
    }
    if (info.train_runs < 1) throw InputError("'" + file.string() + "' has no training runs");
    LoadRuns(*data_, data_->TrainRuns(), &train_images_, &train_actions_);
    val_runs_ = data_->ValidationRuns();
    if (cfg_.val_runs > 0 && int64_t(val_runs_.size()) > cfg_.val_runs) {
      val_runs_.resize(size_t(cfg_.val_runs));
    }
    if (!val_runs_.empty()) LoadRuns(*data_, val_runs_, &val_images_, &val_actions_);
    R_ = train_images_.size(0);
    B_ = cfg_.batch_sequences;
    if (B_ > R_) {
      throw InputError("batch_sequences = " + std::to_string(B_) + " is more than the " +
                       std::to_string(R_) + " training runs of '" + file.string() + "'");
    }
    if (B_ % world_ != 0) {
      throw InputError("batch_sequences = " + std::to_string(B_) + " cannot be shared by " +
                       std::to_string(world_) + " ranks: it must be a multiple of the world size");
    }
    per_rank_ = B_ / world_;
    steps_per_epoch_ = cfg_.StepsPerEpoch(R_);
  }

  // Threads, device, the seeded model and Adam with the perception and dynamics groups (§6).
  void BuildModel() {
    const DatasetInfo& info = data_->info();
    SetThreads(cfg_.threads);
    // "cuda" on a machine with several ranks: each rank on its own GPU (LOCAL_RANK).
    device_ = ResolveDevice(world_ > 1 && cfg_.device == "cuda"
                                ? "cuda:" + std::to_string(comm_->local_rank())
                                : cfg_.device);
    if (!ModelSupportsControl(cfg_.model, info.control)) {
      throw InputError("model '" + cfg_.model +
                       "' has no action input (as published, it trains on unactuated data only): "
                       "the data set is " +
                       ControlModeString(info.control) +
                       "-actuated; train it on a data set generated with control = none");
    }
    torch::manual_seed(cfg_.seed);
    ModelSpec spec;
    spec = SpecSystem(info);
    spec.action_dim = info.nu;
    spec.hidden = cfg_.hidden;
    spec.image_size = info.size;
    spec.sigma = cfg_.sigma;
    spec.dense_init = ParseDenseInit(cfg_.dense_init);
    spec.dt = info.dt;
    spec.model = cfg_.model;
    model_ = CreateModel(spec);
    model_->to(device_);
    if (!cfg_.con_weights.empty()) {  // fail before the first step, not inside it
      const torch::Tensor x0 = torch::zeros({1, 2 * spec.num_keypoints}, torch::Device(device_));
      const int64_t C = model_->dynamics().ConstraintValues(x0).size(1);
      if (int64_t(cfg_.con_weights.size()) != C) {
        throw InputError("[train] con_weights has " + std::to_string(cfg_.con_weights.size()) +
                         " weights, but " + info.system + " has " + std::to_string(C) +
                         " constraints (one weight each, in the system's order)");
      }
    }
    if (auto* own = dynamic_cast<OwnObjective*>(model_.get())) {
      std::vector<float> mean = data_->ReadMeanImage();  // [H, W, 3]
      own->InitialiseFromData(torch::from_blob(mean.data(), {info.size, info.size, 3})
                                  .permute({2, 0, 1})
                                  .contiguous()
                                  .to(device_));
    }
    model_->SetPrecision(ParsePrecision(cfg_.precision));
    model_->SetTrunkKernels(ResolveTrunkKernels(cfg_.kernels, cfg_.device, cfg_.precision));
    if (!options_.quiet && Leader()) {
      std::string batch;
      if (B_ > 1 || world_ > 1) {
        batch = ", " + std::to_string(B_) + " sequences per step";
        if (world_ > 1) {
          batch += " (" + std::to_string(per_rank_) + " on each of " + std::to_string(world_) +
                   " ranks, " + comm_->options().backend + ")";
        }
      }
      std::printf("%s %s%s on %s%s\n", options_.resume ? "resuming" : "training",
                  DescribeModel(spec).c_str(),
                  model_->precision() == Precision::kBfloat16
                      ? " (bf16 convolutions)"
                      : (model_->trunk_kernels() == TrunkKernels::kLibTorch ||
                                 !model_->StatesAreImageKeypoints()  // no U-Nets
                             ? ""
                             : (" (" + NameOf(model_->trunk_kernels()) + " U-Net kernels)").c_str()),
                  data_->path().c_str(), batch.c_str());
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

  // Learning rates of both groups at `factor` × the config's (the schedule's value), the
  // dynamics parameters' at `dynamics_scale` × that.
  void SetLearningRates(double factor, double dynamics_scale) {
    auto& g = adam_->param_groups();
    static_cast<torch::optim::AdamOptions&>(g[0].options()).lr(cfg_.lr * factor);
    static_cast<torch::optim::AdamOptions&>(g[1].options()).lr(cfg_.lr * dynamics_scale * factor);
  }

  // The random stream, and on --resume the saved parameters, optimizer state, position and
  // stream; learning rates follow the config (so a run can resume with a lower --lr).
  void Restore() {
    rng_.seed(cfg_.seed ^ 0x6b6579636c64ULL);  // stream "keycld"
    if (!options_.resume) return;
    LoadCheckpoint(last_, model_, adam_.get(), &pos_);
    std::istringstream(pos_.rng_state) >> rng_;
    SetLearningRates(1.0, cfg_.DynamicsLrScaleAt(pos_.step, steps_per_epoch_));
    if (!pos_.config_toml.empty()) {
      TrainConfig saved;
      saved.MergeToml(pos_.config_toml, last_.string());
      if (saved.batch_sequences != cfg_.batch_sequences) {
        throw InputError("'" + last_.string() + "' was trained with batch_sequences = " +
                         std::to_string(saved.batch_sequences) + ", the config says " +
                         std::to_string(cfg_.batch_sequences) +
                         " (the batch is part of the run: start a new one to change it)");
      }
    }
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
    const TrainConfig recorded = RecordedConfig(cfg_, data_->info());
    pos_.config_toml = recorded.ToToml();
    if (!Leader()) return;
    fs::create_directories(checkpoints_);
    WriteTextAtomically(run_ / "config.toml", recorded.ToToml());
    metrics_ =
        std::make_unique<MetricsWriter>(run_ / "metrics.jsonl", options_.resume ? pos_.step : -1);
  }

  // The metrics go to disk before the checkpoint, so that every checkpoint's records are on
  // disk (a resume drops the records after the checkpoint, never the ones before it).
  void Save(const fs::path& file) {
    if (!Leader()) return;
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
    if (options_.resume && Leader()) FinishEpochEnd();
    while (pos_.epoch < cfg_.epochs) {
      if (pos_.order.empty()) pos_.order = Shuffled(R_, rng_);
      ProgressBar bar("epoch " + std::to_string(pos_.epoch + 1) + "/" + std::to_string(cfg_.epochs),
                      steps_per_epoch_, "steps", options_.progress && Leader() && ::isatty(2));
      bool stopped = false;
      while (pos_.step_in_epoch < steps_per_epoch_) {
        if (cfg_.max_steps > 0 && pos_.step >= cfg_.max_steps) {
          stopped = true;
          break;
        }
        const StepRecord r = DistributedStep();
        char suffix[96];
        std::snprintf(suffix, sizeof suffix, "loss %.4g (rec %.3g dyn %.3g bce %.3g)", r.loss,
                      r.rec, r.dyn, r.bce);
        bar.Update(pos_.step_in_epoch, suffix);
      }
      if (stopped) break;
      EndEpoch(bar);
    }
    if (pos_.step_in_epoch > 0 || !saved_once_) Save(last_);
    if (metrics_) metrics_->Flush();  // the records after the last save (none if it just saved)
    // The ranks end together, once rank 0's checkpoint is on disk.
    if (world_ > 1) comm_->Barrier("the end of training");
    summary_.steps = pos_.step;
    summary_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const int64_t done = pos_.step - first_step;
    summary_.seconds_per_step = done > 0 ? step_seconds_ / double(done) : 0;
    summary_.steps_this_call = done;
    summary_.checkpoint = last_;
    return summary_;
  }

  // Step, with the way back named when a collective fails (a rank gone, a timeout).
  StepRecord DistributedStep() {
    if (world_ == 1) return Step();
    try {
      return Step();
    } catch (const IoError& e) {
      throw IoError(std::string(e.what()) + "; " +
                    (saved_once_ ? "the last checkpoint is kept: " + last_.string() +
                                       " (continue with --resume once every rank can run)"
                                 : std::string("no checkpoint was saved yet")));
    }
  }

  // A flag raised on any rank, as every rank sees it (one collective when distributed).
  bool AnyRank(bool flag, const char* what) {
    if (world_ == 1) return flag;
    torch::Tensor t =
        torch::full({1}, flag ? 1.0f : 0.0f, torch::TensorOptions().device(comm_->device()));
    comm_->AllReduceSum(t, what);
    return t.item<float>() > 0;
  }

  // The gradients summed over the ranks, in place: one flat buffer per parameter dtype (the
  // float64 dynamics parameters stay float64), plus `stats` (float64, summed too).
  void AllReduceGradients(torch::Tensor& stats) {
    std::vector<torch::Tensor> params = model_->parameters();
    for (auto& p : params) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
    std::vector<torch::ScalarType> dtypes;
    for (auto& p : params) {
      if (std::find(dtypes.begin(), dtypes.end(), p.scalar_type()) == dtypes.end()) {
        dtypes.push_back(p.scalar_type());
      }
    }
    for (torch::ScalarType dtype : dtypes) {
      std::vector<torch::Tensor> grads;
      for (auto& p : params) {
        if (p.scalar_type() == dtype) grads.push_back(p.grad().reshape({-1}));
      }
      torch::Tensor flat = torch::cat(grads).to(comm_->device());
      comm_->AllReduceSum(flat, "the gradient all-reduce");
      flat = flat.to(params.front().device());
      int64_t offset = 0;
      for (auto& p : params) {
        if (p.scalar_type() != dtype) continue;
        const int64_t n = p.numel();
        p.mutable_grad().copy_(flat.narrow(0, offset, n).view_as(p));
        offset += n;
      }
    }
    torch::Tensor s = stats.to(comm_->device());
    comm_->AllReduceSum(s, "the loss all-reduce");
    stats.copy_(s.cpu());
  }

  // One optimizer step (§6) on the next batch_sequences training runs of the epoch's order:
  // this rank's share of them (per_rank_ runs), the gradient of their mean loss averaged over
  // the ranks, then clipping and Adam on every rank alike; recorded by rank 0.
  StepRecord Step() {
    if (AnyRank(InterruptRequested(), "the step's start")) {
      Save(last_);
      throw Interrupted("training interrupted at step " + std::to_string(pos_.step) +
                        (Leader() ? "; saved " + last_.string() + " (continue with --resume)"
                                  : std::string(" (rank 0 saved the checkpoint)")));
    }
    const auto step_start = std::chrono::steady_clock::now();
    LossOptions lo;
    lo.horizon = cfg_.HorizonAt(pos_.step, steps_per_epoch_);
    lo.w_rec = cfg_.w_rec;
    lo.w_bce = cfg_.w_bce;
    lo.w_con = cfg_.w_con;
    lo.con_weights = cfg_.con_weights;
    lo.max_acceleration = cfg_.max_acceleration;
    lo.integrator = cfg_.IntegratorAt(pos_.step, steps_per_epoch_);
    lo.substeps = cfg_.SubstepsAt(pos_.step, steps_per_epoch_);
    lo.w_dyn = cfg_.WDynAt(pos_.step, steps_per_epoch_);
    lo.w_kl = cfg_.w_kl;
    lo.w_norm = cfg_.w_norm;
    const bool augment = cfg_.AugmentAt(pos_.step, steps_per_epoch_);
    adam_->zero_grad();
    // total, reconstruction, dynamics, heatmap, KL, constraint summed over this rank's runs;
    // failures.
    double sums[6] = {0, 0, 0, 0, 0, 0};
    const bool own_objective = dynamic_cast<OwnObjective*>(model_.get()) != nullptr;
    std::string failure;
    for (int64_t j = 0; j < B_; ++j) {
      // Every rank draws the augmentation of every run of the step, so that the random stream
      // (and with it the checkpoint) is the same on all of them.
      torch::Tensor ids;
      if (augment) {
        std::vector<int64_t> draws(size_t(data_->info().frames));
        for (auto& d : draws) d = int64_t(rng_() % 8);
        ids = torch::tensor(draws, torch::kInt64);
      }
      if (own_objective) lo.noise_seed = rng_();
      if (j / per_rank_ != rank_ || !failure.empty()) continue;
      const int64_t r = pos_.order[size_t(pos_.step_in_epoch * B_ + j)];
      torch::Tensor images = ImagesToFloat(train_images_[r], device_);
      torch::Tensor u = train_actions_[r].to(device_);
      try {
        LossTerms loss = SequenceLoss(model_, images, u, ids, lo);
        const double total = loss.total.item<double>();
        if (!std::isfinite(total)) {
          failure = "non-finite loss";
          continue;
        }
        (B_ == 1 ? loss.total : loss.total / double(B_)).backward();
        sums[0] += total;
        sums[1] += loss.reconstruction.item<double>();
        sums[2] += loss.dynamics.item<double>();
        sums[3] += loss.heatmap.item<double>();
        if (loss.kl.defined()) sums[4] += loss.kl.item<double>();
        if (loss.constraint.defined()) sums[5] += loss.constraint.item<double>();
      } catch (const c10::Error& e) {
        // LibTorch's own checks on non-finite values (e.g. a singular solve of the constraint
        // forces once the masses overflow) are the same failure as a non-finite loss.
        failure = std::string(e.what_without_backtrace()).substr(0, 120);
      }
    }
    if (world_ > 1) {
      torch::Tensor stats =
          torch::tensor({sums[0], sums[1], sums[2], sums[3], sums[4], sums[5],
                         failure.empty() ? 0.0 : 1.0},
                        torch::kFloat64);
      AllReduceGradients(stats);
      for (int i = 0; i < 6; ++i) sums[i] = stats[i].item<double>();
      if (failure.empty() && stats[6].item<double>() > 0) failure = "failure on another rank";
    }
    if (!failure.empty()) throw NumericalError(Diverged(failure));
    for (auto& p : model_->parameters()) {
      if (p.grad().defined()) p.grad().clamp_(-cfg_.grad_clip, cfg_.grad_clip);
    }
    const double lr_factor = cfg_.LearningRateFactor(pos_.step, cfg_.TotalSteps(steps_per_epoch_));
    const double dynamics_scale = cfg_.DynamicsLrScaleAt(pos_.step, steps_per_epoch_);
    SetLearningRates(lr_factor, dynamics_scale);
    adam_->step();
    ++pos_.step;
    ++pos_.step_in_epoch;
    StepRecord rec;
    rec.step = pos_.step;
    rec.epoch = pos_.epoch + 1;
    rec.loss = sums[0] / double(B_);
    rec.rec = sums[1] / double(B_);
    rec.dyn = sums[2] / double(B_);
    rec.bce = sums[3] / double(B_);
    if (own_objective) rec.kl = sums[4] / double(B_);
    if (!own_objective) rec.con = sums[5] / double(B_);
    rec.lr = cfg_.lr * lr_factor;
    rec.dynamics_lr = rec.lr * dynamics_scale;
    rec.horizon = lo.horizon;
    rec.w_dyn = lo.w_dyn;
    rec.integrator = IntegratorMethodString(lo.integrator);
    rec.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (metrics_) metrics_->Append(rec);
    summary_.last_loss = rec.loss;
    step_seconds_ += rec.seconds;
    return rec;
  }

  // Every rank must start from the same point: the same data set, batch and position, and the
  // same parameters (rank 0's are broadcast, so that they are identical to the bit). A
  // mismatch stops every rank with the same InputError.
  void Handshake() {
    const DatasetInfo& info = data_->info();
    std::vector<torch::Tensor> params = model_->parameters();
    double checksum = 0;
    for (auto& p : params) checksum += p.detach().to(torch::kFloat64).abs().sum().item<double>();
    // The settings that must agree: all but the data file's path, threads and device.
    TrainConfig settings = RecordedConfig(cfg_, info);
    settings.data.clear();
    settings.threads = 0;
    settings.device = "cpu";
    const std::string toml = settings.ToToml();
    const std::vector<double> mine = {
        double(R_), double(info.frames), double(info.size),     double(info.seed),
        double(B_), double(pos_.step),   double(params.size()), double(toml.size()),
        checksum};
    torch::Tensor t = torch::tensor(mine, torch::kFloat64).to(comm_->device());
    comm_->Broadcast(t, 0, "the start-up handshake");
    t = t.cpu();
    torch::Tensor text = torch::zeros({int64_t(t[7].item<double>())}, torch::kUInt8);
    if (Leader()) std::memcpy(text.data_ptr(), toml.data(), toml.size());
    text = text.to(comm_->device());
    comm_->Broadcast(text, 0, "the start-up handshake");
    text = text.cpu();
    const std::string leader_toml(static_cast<const char*>(text.data_ptr()), size_t(text.numel()));
    static const char* names[] = {"training runs",   "frames", "image size",      "data seed",
                                  "batch_sequences", "step",   "parameter count", "settings"};
    std::string mismatch;
    if (leader_toml != toml) {
      TrainConfig theirs;
      theirs.MergeToml(leader_toml, "rank 0's config");
      mismatch =
          "settings differ (this rank's against rank 0's: " + settings.Differences(theirs) + ")";
    }
    for (size_t i = 0; i + 2 < mine.size() && mismatch.empty(); ++i) {
      if (t[int64_t(i)].item<double>() != mine[i]) {
        mismatch = std::string(names[i]) + " " + std::to_string(int64_t(mine[i])) +
                   " against rank 0's " + std::to_string(int64_t(t[int64_t(i)].item<double>()));
        break;
      }
    }
    const double theirs = t[int64_t(mine.size() - 1)].item<double>();
    if (mismatch.empty() &&
        std::abs(theirs - checksum) > 1e-6 * std::max(1.0, std::abs(checksum))) {
      mismatch = "parameters differ from rank 0's (another checkpoint)";
    }
    // Which ranks disagree, known to all: each rank stops with its own reason or their list.
    torch::Tensor flags =
        torch::zeros({int64_t(world_)}, torch::TensorOptions().device(comm_->device()));
    if (!mismatch.empty()) flags[rank_] = 1.0f;
    comm_->AllReduceSum(flags, "the start-up handshake");
    flags = flags.cpu();
    std::string others;
    for (int r = 0; r < world_; ++r) {
      if (flags[r].item<float>() > 0) others += (others.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!others.empty()) {
      throw InputError(
          "distributed training: " +
          (mismatch.empty()
               ? "rank(s) " + others + " do not start like rank 0 (their messages " + "say why)"
               : "rank " + std::to_string(rank_) + " does not start like rank 0: " + mismatch) +
          "; every rank needs the same data set, settings and run folder");
    }
    torch::NoGradGuard no_grad;
    for (auto& p : params) {
      torch::Tensor v = p.detach().to(comm_->device());
      comm_->Broadcast(v, 0, "the parameter broadcast");
      p.copy_(v);
    }
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

  // The keypoint order (train/relabel.h), on every rank alike: the estimates of the first
  // training runs (the same runs, weights and so decision on every rank), every order's
  // constraint spread, and a relabelling of the model and Adam's moments when one order is
  // clearly better. Recorded in the epoch's record.
  void KeypointOrderCheck() {
    constexpr int64_t kRuns = 8;
    constexpr double kRatio = 0.5;
    torch::Tensor keypoints;
    {
      torch::NoGradGuard no_grad;
      std::vector<torch::Tensor> parts;
      for (int64_t r = 0; r < std::min(kRuns, R_); ++r) {
        parts.push_back(model_->Encode(ImagesToFloat(train_images_[r], device_)).keypoints);
      }
      keypoints = torch::cat(parts).to(torch::kFloat64).cpu();  // [N, K, 2]
    }
    order_check_ = ChooseKeypointOrder(model_->spec().Constraints(), keypoints, kRatio);
    if (!order_check_->relabel) return;
    RelabelKeypoints(model_, order_check_->order, adam_.get());
    if (!options_.quiet && Leader()) {
      const std::string order = KeypointOrderString(order_check_->order);
      std::printf("epoch %lld: keypoints relabelled to the order (%s): constraint spread %.3g, "
                  "was %.3g\n",
                  static_cast<long long>(pos_.epoch), order.c_str(), order_check_->best,
                  order_check_->current);
      std::fflush(stdout);
    }
  }

  // The validation VPT of the epoch that just ended, appended to metrics.jsonl.
  EpochRecord RecordEpoch() {
    EpochRecord rec;
    rec.epoch = pos_.epoch;
    rec.step = pos_.step;
    if (order_check_) {
      rec.constraint_spread = order_check_->current;
      rec.best_constraint_spread = order_check_->best;
      if (order_check_->relabel) rec.relabelled = order_check_->order;
    }
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
    summary_.epochs_completed = pos_.epoch;
    saved_once_ = true;
    order_check_.reset();
    if (pos_.epoch <= cfg_.keypoint_relabel_epochs) KeypointOrderCheck();
    if (!Leader()) return;
    Save(last_);
    CopyFileAtomically(last_, EpochFile(pos_.epoch));
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
  std::shared_ptr<Communicator> comm_;
  int rank_ = 0, world_ = 1;
  int64_t B_ = 1, per_rank_ = 1, steps_per_epoch_ = 1;
  fs::path run_, checkpoints_, last_;
  bool created_run_folder_ = false;  // --out did not exist before this call
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
  std::optional<KeypointOrderChoice> order_check_;  // the epoch's keypoint order check
  TrainSummary summary_;
  std::chrono::steady_clock::time_point start_;
  double step_seconds_ = 0;
  bool saved_once_ = false;
};

}  // namespace

TrainSummary Train(const TrainOptions& options) { return Trainer(options).Run(); }

}  // namespace keycld
