// Training (docs/method.md §6): loss decreases, exact resume, Ctrl-C, bad input, checkpoints.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include "keycld/data/generate.h"
#include "keycld/models/keypoint_model.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/loss.h"
#include "keycld/train/metrics.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

extern char** environ;

namespace keycld {
namespace {

// A tiny pendulum data set: 6 runs (5 train, 1 validation) of 10 frames at 16×16.
std::filesystem::path TinyData(const std::filesystem::path& dir, int size = 16,
                               ControlMode control = ControlMode::kNone) {
  return testing::TinyPendulumData(dir, size, control);
}

TrainOptions TinyRun(const std::filesystem::path& data, const std::filesystem::path& run) {
  return testing::TinyTrainOptions(data, run);
}

constexpr auto Parameters = &testing::CheckpointParameters;

TEST(Train, TrainingStepFlopsCountForwardAndBothBackwardPasses) {
  ModelSpec spec;  // the paper setting: 64×64, h = 32, pendulum K = 1
  // Per frame: forward (268,959,744 + 305,528,832) MACs · 2 FLOPs, three times (forward, weight
  // and input gradients) less the estimator's first layer's input gradient (3·32·9·64² MACs).
  const double per_frame = 3.0 * 2.0 * (268959744.0 + 305528832.0) - 2.0 * 3 * 32 * 9 * 4096;
  EXPECT_DOUBLE_EQ(TrainingStepFlops(spec, 50), 50.0 * per_frame);
  EXPECT_NEAR(TrainingStepFlops(spec, 50) / 1e9, 172.0, 0.05);
  EXPECT_DOUBLE_EQ(TrainingStepFlops(spec, 10), TrainingStepFlops(spec, 50) / 5.0);
}

TEST(Train, ConfigTomlRoundTripsAndRejectsUnknownKeys) {
  TrainConfig c;
  c.data = "x.h5";
  c.hidden = 16;
  c.lr = 1e-3;
  c.augment = false;
  c.model = "node2";
  c.precision = "bf16";
  c.integrator = "verlet";
  c.integrator_substeps = 3;
  c.integrator_warmup_epochs = 2.5;
  c.warmup_horizon = 2;
  c.horizon_warmup_epochs = 1.5;
  c.warmup_dynamics_lr_scale = 0.5;
  c.dynamics_lr_warmup_epochs = 3;
  c.w_rec = 4.0;
  c.w_dyn_warmup_epochs = 1.0;
  c.dense_init = "fan-in";
  TrainConfig d;
  d.MergeToml(c.ToToml(), "roundtrip");
  EXPECT_EQ(d.ToToml(), c.ToToml());
  EXPECT_EQ(d.hidden, 16);
  EXPECT_EQ(d.precision, "bf16");
  EXPECT_EQ(d.integrator, "verlet");
  EXPECT_EQ(d.integrator_substeps, 3);
  EXPECT_EQ(d.w_rec, 4.0);
  EXPECT_EQ(d.dense_init, "fan-in");
  TrainConfig uniform;
  uniform.MergeToml("[model]\ndense_init = \"uniform\"\n", "t");
  EXPECT_THROW(uniform.Validate(), InputError);
  TrainConfig fp16;
  fp16.MergeToml("[train]\nprecision = \"fp16\"\n", "t");
  EXPECT_THROW(fp16.Validate(), InputError);
  EXPECT_FALSE(d.augment);
  EXPECT_THROW(d.MergeToml("[train]\nlearning_rate = 1.0\n", "t"), InputError);
  EXPECT_THROW(d.MergeToml("[train]\nepochs = \"many\"\n", "t"), InputError);
  EXPECT_THROW(d.MergeToml("[optimizer]\nlr = 1.0\n", "t"), InputError);
  EXPECT_THROW(d.MergeToml("[train\n", "t"), InputError);
  EXPECT_THROW(d.MergeToml("[model]\nhidden = 4294967304\n", "t"), InputError);
  EXPECT_THROW(d.MergeToml("[train]\nseed = -1\n", "t"), InputError);
  TrainConfig bad;
  bad.hidden = 12;
  EXPECT_THROW(bad.Validate(), InputError);
}

TEST(Train, RunFolderRecordsTheDataSetItWasTrainedOn) {
  // An explicit data file of control mode full, the config left at its defaults ("none"):
  // config.toml must say what the model was trained on (keycld control relies on it).
  testing::TempDir dir;
  auto opt = TinyRun(TinyData(dir.path(), 16, ControlMode::kFull), dir / "run");
  opt.config.epochs = 1;
  ASSERT_EQ(opt.config.control, "none");
  Train(opt);
  TrainConfig recorded;
  std::ifstream in(dir / "run/config.toml");
  std::stringstream text;
  text << in.rdbuf();
  recorded.MergeToml(text.str(), "config.toml");
  EXPECT_EQ(recorded.control, "full");
  EXPECT_EQ(recorded.env, "pendulum");
  // TinyPendulumData: 6 runs of 10 frames at 16×16, seed 3 (not the defaults 500, 50, 64, 0).
  EXPECT_EQ(recorded.size, 16);
  EXPECT_EQ(recorded.runs, 6);
  EXPECT_EQ(recorded.frames, 10);
  EXPECT_EQ(recorded.data_seed, 3u);
}

// A run refused before anything is written (here: a config for another system than the data
// set's) leaves no folder behind, and a folder that existed before stays.
TEST(Train, ARefusedRunLeavesNoFolderBehind) {
  testing::TempDir dir;
  const auto data = testing::TinyPendulumData(dir.path());
  TrainOptions t = testing::TinyTrainOptions(data, dir / "refused");
  t.config.env = "cartpole";
  EXPECT_THROW(Train(t), InputError);
  EXPECT_FALSE(std::filesystem::exists(dir / "refused"));
  std::filesystem::create_directories(dir / "kept");
  std::ofstream(dir / "kept" / "notes.txt") << "mine\n";
  t.run_dir = dir / "kept";
  EXPECT_THROW(Train(t), InputError);
  EXPECT_TRUE(std::filesystem::exists(dir / "kept" / "notes.txt"));
}

TEST(Train, ATinyRunLowersTheLoss) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  auto opt = TinyRun(data, dir / "run");
  opt.config.epochs = 6;
  opt.config.lr = 3e-3;
  // The loss of a fixed sequence, without augmentation, before and after training.
  Dataset d = Dataset::Open(data);
  torch::Tensor images = ImagesToFloat(
      torch::from_blob(d.ReadImages(0).data(), {10, 16, 16, 3}, torch::kUInt8).clone(),
      torch::kCPU);
  torch::Tensor u = torch::zeros({1});
  auto loss_of = [&](Model model) {
    torch::NoGradGuard g;
    return SequenceLoss(model, images, u, {}, {}).total.item<double>();
  };
  torch::manual_seed(opt.config.seed);
  ModelSpec spec;
  spec.hidden = 8;
  spec.image_size = 16;
  spec.dt = 0.02;
  Model initial = CreateModel(spec);
  const double before = loss_of(initial);
  TrainSummary s = Train(opt);
  EXPECT_EQ(s.steps, 6 * 5);
  EXPECT_EQ(s.epochs_completed, 6);
  const double after = loss_of(LoadModel(s.checkpoint, torch::kCPU));
  // The run folder loads the same model as its last checkpoint.
  EXPECT_EQ(loss_of(LoadModel(dir / "run", torch::kCPU)), after);
  EXPECT_LT(after, 0.8 * before) << "before " << before << ", after " << after;
  // Run folder layout.
  EXPECT_TRUE(std::filesystem::exists(dir / "run/config.toml"));
  EXPECT_TRUE(std::filesystem::exists(dir / "run/checkpoints/epoch-0006.pt"));
  std::ifstream metrics(dir / "run/metrics.jsonl");
  int steps = 0, epochs = 0;
  for (std::string line; std::getline(metrics, line);) {
    steps += line.find("\"type\":\"step\"") != std::string::npos;
    epochs += line.find("\"val_vpt_mean\"") != std::string::npos;
  }
  EXPECT_EQ(steps, 30);
  EXPECT_EQ(epochs, 6);
  EXPECT_GE(s.val_vpt_mean, 0.0);
  EXPECT_LE(s.val_vpt_mean, 9.0);
}

// Each integrator of the dynamics loss trains (the loss of a fixed sequence, measured with that
// integrator, falls), and a warm-up schedule is followed step by step and recorded.
TEST(Train, EveryLossIntegratorLowersTheLossAndTheScheduleIsRecorded) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  Dataset d = Dataset::Open(data);
  torch::Tensor images = ImagesToFloat(
      torch::from_blob(d.ReadImages(0).data(), {10, 16, 16, 3}, torch::kUInt8).clone(),
      torch::kCPU);
  for (const char* name : {"rk4", "verlet"}) {
    auto opt = TinyRun(data, dir / (std::string("run-") + name));
    opt.config.epochs = 6;
    opt.config.lr = 3e-3;
    opt.config.integrator = name;
    opt.config.integrator_warmup_epochs = 1;  // one epoch (5 steps) of Euler first
    opt.config.max_acceleration = 1000;
    LossOptions lo;
    lo.integrator = ParseIntegratorMethod(name);
    auto loss_of = [&](Model model) {
      torch::NoGradGuard g;
      return SequenceLoss(model, images, torch::zeros({1}), {}, lo).total.item<double>();
    };
    torch::manual_seed(opt.config.seed);
    Model initial = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
    const double before = loss_of(initial);
    TrainSummary s = Train(opt);
    const double after = loss_of(LoadModel(s.checkpoint, torch::kCPU));
    EXPECT_LT(after, 0.8 * before) << name << ": before " << before << ", after " << after;
    // metrics.jsonl: Euler for steps 1-5, then the chosen integrator.
    std::ifstream metrics(opt.run_dir / "metrics.jsonl");
    int euler = 0, chosen = 0;
    for (std::string line; std::getline(metrics, line);) {
      if (line.find("\"type\":\"step\"") == std::string::npos) continue;
      const bool is_euler = line.find("\"integrator\":\"euler\"") != std::string::npos;
      const bool early = line.find("\"epoch\":1,") != std::string::npos;
      EXPECT_EQ(is_euler, early) << line;
      (is_euler ? euler : chosen)++;
    }
    EXPECT_EQ(euler, 5);
    EXPECT_EQ(chosen, 25);
    // config.toml and the checkpoint both record the schedule.
    TrainConfig recorded = TrainConfig::FromToml(opt.run_dir / "config.toml");
    EXPECT_EQ(recorded.integrator, name);
    EXPECT_EQ(recorded.integrator_warmup_epochs, 1.0);
    TrainConfig in_checkpoint;
    in_checkpoint.MergeToml(ReadCheckpointConfig(s.checkpoint), "checkpoint");
    EXPECT_EQ(in_checkpoint.ToToml(), recorded.ToToml());
  }
  // The integrators give different losses for the same model; dopri5 is not a loss integrator.
  torch::manual_seed(0);
  Model m = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
  torch::NoGradGuard g;
  LossOptions euler, rk4, dopri;
  rk4.integrator = IntegratorMethod::kRk4;
  dopri.integrator = IntegratorMethod::kDopri5;
  EXPECT_NE(SequenceLoss(m, images, torch::zeros({1}), {}, euler).dynamics.item<double>(),
            SequenceLoss(m, images, torch::zeros({1}), {}, rk4).dynamics.item<double>());
  EXPECT_THROW(SequenceLoss(m, images, torch::zeros({1}), {}, dopri), InputError);
  LossOptions zero_substeps;
  zero_substeps.substeps = 0;
  EXPECT_THROW(SequenceLoss(m, images, torch::zeros({1}), {}, zero_substeps), InputError);
}

// The acceleration bound of the dynamics loss: no effect far above the accelerations, and with a
// bound near zero the prediction is the constant-velocity one, x_t + jΔt ẋ_t, computed here.
TEST(Train, AccelerationBoundOfTheDynamicsLoss) {
  testing::TempDir dir;
  Dataset d = Dataset::Open(TinyData(dir.path()));
  torch::Tensor images = ImagesToFloat(
      torch::from_blob(d.ReadImages(2).data(), {10, 16, 16, 3}, torch::kUInt8).clone(),
      torch::kCPU);
  torch::manual_seed(5);
  Model m = CreateModel(testing::TinyModelSpec(EnvName::kPendulum, "keycld-nc"));
  torch::NoGradGuard g;
  const torch::Tensor u = torch::zeros({1});
  for (IntegratorMethod method : {IntegratorMethod::kEuler, IntegratorMethod::kRk4}) {
    LossOptions free, loose, tight;
    free.integrator = loose.integrator = tight.integrator = method;
    loose.max_acceleration = 1e12;
    tight.max_acceleration = 1e-12;
    EXPECT_EQ(SequenceLoss(m, images, u, {}, free).dynamics.item<double>(),
              SequenceLoss(m, images, u, {}, loose).dynamics.item<double>());
    // Constant velocity from the central differences (NC: no velocity projection).
    const torch::Tensor x = m->Encode(images).keypoints.reshape({10, 2}).to(torch::kFloat64);
    double expected = 0;
    for (int t = 1; t + 4 <= 9; ++t) {
      const torch::Tensor v = (x[t + 1] - x[t - 1]) / (2 * 0.02);
      for (int j = 1; j <= 4; ++j)
        expected += (x[t] + v * (j * 0.02) - x[t + j]).square().sum().item<double>();
    }
    EXPECT_NEAR(SequenceLoss(m, images, u, {}, tight).dynamics.item<double>(), expected,
                1e-5 * expected + 1e-9);
  }
  LossOptions negative;
  negative.max_acceleration = -1;
  EXPECT_THROW(SequenceLoss(m, images, u, {}, negative), InputError);
}

TEST(Train, DynamicsLossOfGivenKeypoints) {
  // With the acceleration bound at 1e-12 every start moves at its central-difference velocity,
  // so the loss is a closed form of the keypoints; and the term equals SequenceLoss's.
  torch::manual_seed(6);
  Model m = CreateModel(testing::TinyModelSpec(EnvName::kPendulum, "keycld-nc"));
  const torch::Tensor x = torch::rand({10, 2}) - 0.5;
  const torch::Tensor u = torch::zeros({1});
  LossOptions tight;
  tight.max_acceleration = 1e-12;
  const torch::Tensor xd = x.to(torch::kFloat64);
  double expected = 0;
  for (int t = 1; t + 4 <= 9; ++t) {
    const torch::Tensor v = (xd[t + 1] - xd[t - 1]) / (2 * 0.02);
    for (int j = 1; j <= 4; ++j)
      expected += (xd[t] + v * (j * 0.02) - xd[t + j]).square().sum().item<double>();
  }
  EXPECT_NEAR(DynamicsLoss(m, x, u, tight).item<double>(), expected, 1e-5 * expected);

  testing::TempDir dir;
  Dataset d = Dataset::Open(TinyData(dir.path()));
  torch::Tensor images = ImagesToFloat(
      torch::from_blob(d.ReadImages(2).data(), {10, 16, 16, 3}, torch::kUInt8).clone(),
      torch::kCPU);
  Model k = CreateModel(testing::TinyModelSpec(EnvName::kPendulum, "keycld"));
  torch::NoGradGuard g;
  LossOptions rk4;
  rk4.integrator = IntegratorMethod::kRk4;
  const torch::Tensor keypoints = k->Encode(images).keypoints.reshape({10, 2});
  EXPECT_EQ(DynamicsLoss(k, keypoints, u, rk4).item<double>(),
            SequenceLoss(k, images, u, {}, rk4).dynamics.item<double>());
  EXPECT_THROW(DynamicsLoss(k, torch::rand({10, 3}), u, rk4), InputError);
  EXPECT_THROW(DynamicsLoss(k, torch::rand({5, 2}), u, rk4), InputError);  // N < P + 2
}

// L_con is Σ_t Σ_c Φ_c(x_t)² of the estimated keypoints, with the acrobot's Φ written out
// (‖p₁‖ − 0.3, ‖p₁ − p₂‖ − 0.3; docs/method.md §4); w_con adds w_con · L_con to the total; the
// unconstrained ablation has no constraints, so no term.
TEST(Train, ConstraintResidualTerm) {
  testing::TempDir dir;
  Dataset d = Dataset::Open(testing::TinyData(dir.path(), EnvName::kAcrobot));
  torch::Tensor images = ImagesToFloat(
      torch::from_blob(d.ReadImages(1).data(), {10, 16, 16, 3}, torch::kUInt8).clone(),
      torch::kCPU);
  const torch::Tensor u = torch::zeros({2});
  torch::manual_seed(4);
  Model k = CreateModel(testing::TinyModelSpec(EnvName::kAcrobot, "keycld"));
  torch::NoGradGuard g;
  const torch::Tensor x = k->Encode(images).keypoints.reshape({10, 4}).to(torch::kFloat64);
  const torch::Tensor p1 = x.slice(1, 0, 2), p2 = x.slice(1, 2, 4);
  const double expected = ((p1.norm(2, 1) - 0.3).square().sum() +
                           ((p1 - p2).norm(2, 1) - 0.3).square().sum())
                              .item<double>();
  LossOptions plain, weighted;
  weighted.w_con = 2.5;
  const LossTerms a = SequenceLoss(k, images, u, {}, plain);
  const LossTerms b = SequenceLoss(k, images, u, {}, weighted);
  EXPECT_GT(expected, 1e-3);
  EXPECT_NEAR(a.constraint.item<double>(), expected, 1e-5 * expected);
  EXPECT_NEAR(b.total.item<double>() - a.total.item<double>(), 2.5 * expected, 1e-4 * expected);
  Model nc = CreateModel(testing::TinyModelSpec(EnvName::kAcrobot, "keycld-nc"));
  EXPECT_EQ(SequenceLoss(nc, images, u, {}, weighted).constraint.item<double>(), 0.0);
  TrainConfig bad;
  bad.w_con = -1;
  EXPECT_THROW(bad.Validate(), InputError);

  // con_weights weigh each constraint's squares: [0, 1] keeps the link alone, [2, 0.5] mixes.
  const double shoulder = (p1.norm(2, 1) - 0.3).square().sum().item<double>();
  const double link = ((p1 - p2).norm(2, 1) - 0.3).square().sum().item<double>();
  ASSERT_GT(shoulder, 1e-4);
  ASSERT_GT(link, 1e-4);
  LossOptions link_only = weighted, mixed = weighted;
  link_only.con_weights = {0.0, 1.0};
  mixed.con_weights = {2.0, 0.5};
  EXPECT_NEAR(SequenceLoss(k, images, u, {}, link_only).constraint.item<double>(), link,
              1e-5 * link);
  const double want_mixed = 2.0 * shoulder + 0.5 * link;
  const LossTerms m = SequenceLoss(k, images, u, {}, mixed);
  EXPECT_NEAR(m.constraint.item<double>(), want_mixed, 1e-5 * want_mixed);
  EXPECT_NEAR(m.total.item<double>() - a.total.item<double>(), 2.5 * want_mixed,
              1e-4 * want_mixed);
  LossOptions three = weighted;
  three.con_weights = {1.0, 1.0, 1.0};  // the acrobot has two constraints
  EXPECT_THROW(SequenceLoss(k, images, u, {}, three), InputError);

  // The config key: read, written back by ToToml, validated, dropped for other models.
  TrainConfig c;
  c.MergeToml("[train]\ncon_weights = [1, 0.25]\n", "test");
  EXPECT_EQ(c.con_weights, (std::vector<double>{1.0, 0.25}));
  TrainConfig again;
  again.MergeToml(c.ToToml(), "round trip");
  EXPECT_EQ(again.con_weights, c.con_weights);
  EXPECT_EQ(again.Differences(c), "");
  EXPECT_NE(TrainConfig().Differences(c), "");
  EXPECT_THROW(c.MergeToml("[train]\ncon_weights = 1\n", "test"), InputError);
  EXPECT_THROW(c.MergeToml("[train]\ncon_weights = [1, \"x\"]\n", "test"), InputError);
  TrainConfig negative;
  negative.con_weights = {1.0, -0.5};
  EXPECT_THROW(negative.Validate(), InputError);
  TrainConfig nc_cfg;
  nc_cfg.con_weights = {1.0};
  nc_cfg.model = "keycld-nc";
  EXPECT_THROW(nc_cfg.Validate(), InputError);
  nc_cfg.model = "keycld";
  nc_cfg.UseModel("node2");
  EXPECT_TRUE(nc_cfg.con_weights.empty());
}

TEST(Train, IntegratorAndWeightSchedules) {
  TrainConfig c;
  c.integrator = "rk4";
  c.integrator_substeps = 2;
  c.integrator_warmup_epochs = 1.5;
  c.w_dyn = 2.0;
  c.w_dyn_warmup_epochs = 2.0;
  // 10 training runs per epoch: warm-up until step 15, w_dyn ramps over 20 steps.
  EXPECT_EQ(c.IntegratorAt(0, 10), IntegratorMethod::kEuler);
  EXPECT_EQ(c.SubstepsAt(0, 10), 1);
  EXPECT_EQ(c.IntegratorAt(14, 10), IntegratorMethod::kEuler);
  EXPECT_EQ(c.IntegratorAt(15, 10), IntegratorMethod::kRk4);
  EXPECT_EQ(c.SubstepsAt(15, 10), 2);
  EXPECT_DOUBLE_EQ(c.WDynAt(0, 10), 0.0);
  EXPECT_DOUBLE_EQ(c.WDynAt(5, 10), 0.5);
  EXPECT_DOUBLE_EQ(c.WDynAt(20, 10), 2.0);
  EXPECT_DOUBLE_EQ(c.WDynAt(400, 10), 2.0);
  TrainConfig plain;
  EXPECT_EQ(plain.IntegratorAt(0, 10), IntegratorMethod::kEuler);  // the paper's
  EXPECT_DOUBLE_EQ(plain.WDynAt(0, 10), 1.0);
  for (const char* bad :
       {"[train]\nintegrator = \"dopri5\"\n", "[train]\nwarmup_integrator = \"leapfrog\"\n",
        "[train]\nintegrator_substeps = 0\n", "[train]\nintegrator_warmup_epochs = -1.0\n",
        "[train]\nw_rec = -1.0\n", "[train]\nw_dyn = nan\n"}) {
    TrainConfig t;
    t.MergeToml(bad, "t");
    EXPECT_THROW(t.Validate(), InputError) << bad;
  }
}

// The horizon and the dynamics parameters' learning rate follow their warm-up schedules: the
// metrics record them step by step, and Adam's first step, which moves every parameter by its
// learning rate (m̂/(√v̂ + ε) ≈ ±1), moves the dynamics parameters 0.2× as far with
// warmup_dynamics_lr_scale = 0.2 during the warm-up as with dynamics_lr_scale = 1 without it.
TEST(Train, HorizonAndDynamicsLearningRateSchedules) {
  TrainConfig c;
  c.horizon = 16;
  c.warmup_horizon = 4;
  c.horizon_warmup_epochs = 2;
  c.dynamics_lr_scale = 1.0;
  c.warmup_dynamics_lr_scale = 0.2;
  c.dynamics_lr_warmup_epochs = 0.5;
  EXPECT_EQ(c.HorizonAt(19, 10), 4);
  EXPECT_EQ(c.HorizonAt(20, 10), 16);
  EXPECT_EQ(c.MaxHorizon(), 16);
  EXPECT_DOUBLE_EQ(c.DynamicsLrScaleAt(4, 10), 0.2);
  EXPECT_DOUBLE_EQ(c.DynamicsLrScaleAt(5, 10), 1.0);
  TrainConfig plain;  // no warm-up: the warm-up values are never used
  plain.warmup_horizon = 40;
  EXPECT_EQ(plain.HorizonAt(0, 10), 4);
  EXPECT_EQ(plain.MaxHorizon(), 4);
  EXPECT_DOUBLE_EQ(plain.DynamicsLrScaleAt(0, 10), 0.2);
  for (const char* bad : {"[train]\nwarmup_horizon = 0\n", "[train]\nhorizon_warmup_epochs = -1.0\n",
                          "[train]\nwarmup_dynamics_lr_scale = 0.0\n",
                          "[train]\ndynamics_lr_warmup_epochs = inf\n"}) {
    TrainConfig t;
    t.MergeToml(bad, "t");
    EXPECT_THROW(t.Validate(), InputError) << bad;
  }

  testing::TempDir dir;
  auto data = TinyData(dir.path());  // 10 frames: horizon ≤ 8
  {  // A horizon longer than the runs allow is refused, warm-up or not.
    auto opt = TinyRun(data, dir / "too-long");
    opt.config.warmup_horizon = 9;
    opt.config.horizon_warmup_epochs = 1;
    EXPECT_THROW(Train(opt), InputError);
  }
  auto opt = TinyRun(data, dir / "scheduled");
  opt.config.epochs = 2;
  opt.config.lr = 1e-3;
  opt.config.horizon = 4;
  opt.config.warmup_horizon = 2;
  opt.config.horizon_warmup_epochs = 1;  // 5 steps
  opt.config.dynamics_lr_scale = 1.0;
  opt.config.warmup_dynamics_lr_scale = 0.2;
  opt.config.dynamics_lr_warmup_epochs = 0.4;  // 2 steps
  Train(opt);
  MetricsHistory h = ReadMetrics(opt.run_dir / "metrics.jsonl");
  ASSERT_EQ(h.steps.size(), 10u);
  for (const StepRecord& r : h.steps) {
    EXPECT_EQ(r.horizon, r.step <= 5 ? 2 : 4) << r.step;
    EXPECT_DOUBLE_EQ(r.dynamics_lr, r.step <= 2 ? 0.2 * r.lr : r.lr) << r.step;
  }
  TrainConfig recorded = TrainConfig::FromToml(opt.run_dir / "config.toml");
  EXPECT_EQ(recorded.warmup_horizon, 2);
  EXPECT_DOUBLE_EQ(recorded.dynamics_lr_warmup_epochs, 0.4);

  auto first_step = [&](const std::string& name, double warmup_epochs) {
    auto o = TinyRun(data, dir / name);
    o.config.lr = 1e-3;
    o.config.max_steps = 1;
    o.config.dynamics_lr_scale = 1.0;
    o.config.warmup_dynamics_lr_scale = 0.2;
    o.config.dynamics_lr_warmup_epochs = warmup_epochs;
    torch::manual_seed(o.config.seed);
    Model initial = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
    Model trained = LoadModel(Train(o).checkpoint, torch::kCPU);
    auto largest_move = [](std::vector<torch::Tensor> a, std::vector<torch::Tensor> b) {
      double m = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        m = std::max(m, (a[i] - b[i]).abs().max().item<double>());
      }
      return m;
    };
    return std::pair{
        largest_move(initial->PerceptionParameters(), trained->PerceptionParameters()),
        largest_move(initial->DynamicsParameters(), trained->DynamicsParameters())};
  };
  const auto [p_warm, d_warm] = first_step("first-warm", 1);
  const auto [p_plain, d_plain] = first_step("first-plain", 0);
  EXPECT_NEAR(p_warm, 1e-3, 1e-5);
  EXPECT_NEAR(p_plain, 1e-3, 1e-5);
  // The same first gradient in both runs: the dynamics' steps differ by the scale alone (Adam's
  // ε = 1e-8 keeps them a little below the learning rate where the gradient is that small).
  EXPECT_GT(d_plain, 0.5e-3);
  EXPECT_LE(d_plain, 1.0001e-3);
  EXPECT_NEAR(d_warm / d_plain, 0.2, 0.002);
}

TEST(Train, ResumesBitForBit) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  // Uninterrupted: 8 steps (one epoch of 5, then 3 more).
  auto straight = TinyRun(data, dir / "straight");
  straight.config.max_steps = 8;
  Train(straight);
  // Interrupted after 3 steps (mid-epoch), then resumed to 8.
  auto first = TinyRun(data, dir / "resumed");
  first.config.max_steps = 3;
  EXPECT_EQ(Train(first).steps, 3);
  auto second = first;
  second.config.max_steps = 8;
  second.resume = true;
  EXPECT_EQ(Train(second).steps, 8);
  auto a = Parameters(dir / "straight/checkpoints/last.pt");
  auto b = Parameters(dir / "resumed/checkpoints/last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  // Metrics of the resumed run hold each step once.
  std::ifstream metrics(dir / "resumed/metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    steps += line.find("\"type\":\"step\"") != std::string::npos;
  }
  EXPECT_EQ(steps, 8);
  // Stopped right at the end of epoch 1 (its validation record written), then resumed: the
  // history equals the uninterrupted one, epoch record included, each step once and in order.
  auto at_epoch = TinyRun(data, dir / "at_epoch");
  at_epoch.config.max_steps = 5;
  Train(at_epoch);
  at_epoch.config.max_steps = 8;
  at_epoch.resume = true;
  Train(at_epoch);
  const MetricsHistory want = ReadMetrics(dir / "straight/metrics.jsonl");
  const MetricsHistory got = ReadMetrics(dir / "at_epoch/metrics.jsonl");
  ASSERT_EQ(want.epochs.size(), 1u);
  ASSERT_EQ(got.epochs.size(), 1u);
  EXPECT_EQ(got.epochs[0].epoch, 1);
  EXPECT_EQ(got.epochs[0].step, 5);
  ASSERT_TRUE(want.epochs[0].vpt_mean && got.epochs[0].vpt_mean);
  EXPECT_DOUBLE_EQ(*got.epochs[0].vpt_mean, *want.epochs[0].vpt_mean);
  ASSERT_EQ(got.steps.size(), 8u);
  for (size_t i = 0; i < got.steps.size(); ++i) {
    EXPECT_EQ(got.steps[i].step, int64_t(i) + 1);
    EXPECT_DOUBLE_EQ(got.steps[i].loss, want.steps[i].loss) << "step " << i + 1;
  }
  EXPECT_GT(TrainingSeconds(got), 0.0);
  EXPECT_LE(TrainingSeconds(got, 1), TrainingSeconds(got));
}

TEST(Train, RefusesBadInput) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  auto opt = TinyRun(data, dir / "run");
  opt.config.env = "cartpole";
  EXPECT_THROW(Train(opt), InputError);  // wrong environment for the config
  opt.config.env = "";
  opt.config.con_weights = {1.0, 0.0};  // the pendulum has one constraint
  EXPECT_THROW(Train(opt), InputError);
  EXPECT_FALSE(std::filesystem::exists(dir / "run"));
  opt.config.con_weights.clear();
  opt.resume = true;
  EXPECT_THROW(Train(opt), InputError);  // nothing to resume
  opt.resume = false;
  opt.config.max_steps = 2;
  Train(opt);
  EXPECT_THROW(Train(opt), InputError);  // the folder already holds a run
  // Another process training in the folder (it holds the lock).
  {
    auto busy = TinyRun(data, dir / "busy");
    std::filesystem::create_directories(dir / "busy");
    int fd = ::open((dir / "busy/.lock").c_str(), O_CREAT | O_RDWR, 0644);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    EXPECT_THROW(Train(busy), InputError);
    ::close(fd);
  }
  // Image size not a multiple of 4.
  auto odd = TinyRun(TinyData(dir / "odd", 18), dir / "odd-run");
  EXPECT_THROW(Train(odd), InputError);
  // A data set that is not one.
  auto text = dir / "notes.h5";
  std::ofstream(text) << "not hdf5";
  auto foreign = TinyRun(text, dir / "foreign-run");
  EXPECT_THROW(Train(foreign), FormatError);
}

TEST(Train, CorruptOrForeignCheckpointsAreRejected) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  auto opt = TinyRun(data, dir / "run");
  opt.config.max_steps = 2;
  Train(opt);
  const auto last = dir / "run/checkpoints/last.pt";
  // Truncated.
  auto good = dir / "good.pt";
  std::filesystem::copy_file(last, good);
  std::filesystem::resize_file(last, std::filesystem::file_size(last) / 2);
  opt.resume = true;
  opt.config.max_steps = 4;
  EXPECT_THROW(Train(opt), FormatError);
  EXPECT_THROW(LoadModel(last, torch::kCPU), FormatError);
  // A LibTorch archive that is not a keycld checkpoint.
  torch::serialize::OutputArchive other;
  other.write("weights", torch::ones({3}));
  other.save_to(last.string());
  EXPECT_THROW(LoadModel(last, torch::kCPU), FormatError);
  // Another model (hidden width) than configured.
  std::filesystem::copy_file(good, last, std::filesystem::copy_options::overwrite_existing);
  opt.config.hidden = 16;
  EXPECT_THROW(Train(opt), FormatError);
  EXPECT_THROW(LoadModel(dir / "missing.pt", torch::kCPU), IoError);
}

TEST(Train, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  auto opt = TinyRun(data, dir / "run");
  opt.config.epochs = 1;
  Train(opt);
  const auto last = dir / "run/checkpoints/last.pt";
  // A checkpoint whose dynamics parameters are 10³⁰ times too large (the configuration's
  // learning rates are bounded, so training itself is not pushed there): the first resumed
  // step's loss overflows.
  {
    Model model = LoadModel(last, torch::kCPU);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(model->PerceptionParameters());
    groups.emplace_back(model->DynamicsParameters());
    torch::optim::Adam adam(std::move(groups), torch::optim::AdamOptions(1e-3));
    TrainPosition position;
    LoadCheckpoint(last, model, &adam, &position);
    torch::NoGradGuard no_grad;
    for (auto& p : model->DynamicsParameters()) p.mul_(1e30);
    SaveCheckpoint(last, model, &adam, position);
  }
  auto before = Parameters(last);
  opt.resume = true;
  opt.config.epochs = 3;
  try {
    Train(opt);
    FAIL() << "a non-finite loss must stop training";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("last good checkpoint"), std::string::npos) << e.what();
  }
  auto after = Parameters(last);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i]));
}

TEST(Train, CtrlCSavesAndTheRunResumes) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  const std::string run = (dir / "run").string();
  std::vector<std::string> args = {KEYCLD_CLI_PATH, "train", "--data",    data.string(),
                                   "--out",         run,     "--hidden",  "8",
                                   "--epochs",      "200",   "--threads", "1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  // Wait for a few steps in metrics.jsonl, then press Ctrl-C.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream m(dir / "run/metrics.jsonl");
    std::string content((std::istreambuf_iterator<char>(m)), {});
    if (std::count(content.begin(), content.end(), '\n') >= 3) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "training did not start";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  ASSERT_TRUE(std::filesystem::exists(dir / "run/checkpoints/last.pt"));
  std::string out;
  EXPECT_EQ(testing::RunCli("train --out " + run + " --resume --steps 40", &out), 0) << out;
  EXPECT_NE(out.find("trained"), std::string::npos) << out;
}

// Steps of metrics.jsonl in file order, and the epochs of its epoch records.
void ReadRecordOrder(const std::filesystem::path& file, std::vector<int64_t>* steps,
                     std::vector<double>* losses, std::vector<int64_t>* epochs) {
  const MetricsHistory h = ReadMetrics(file);
  for (const StepRecord& r : h.steps) {
    steps->push_back(r.step);
    losses->push_back(r.loss);
  }
  for (const EpochRecord& r : h.epochs) epochs->push_back(r.epoch);
}

TEST(Train, KilledAndResumedSeveralTimesEndsLikeAnUninterruptedRun) {
  testing::TempDir dir;
  auto data = TinyData(dir.path());
  auto command = [&](const std::string& run) {
    return std::vector<std::string>{
        KEYCLD_CLI_PATH, "train", "--data",    data.string(), "--out",  run, "--hidden", "8",
        "--epochs",      "12",    "--threads", "1",           "--seed", "5"};
  };
  std::string out;
  const std::string whole = (dir / "whole").string(), cut = (dir / "cut").string();
  std::string args;
  for (size_t i = 1; i < command(whole).size(); ++i) args += command(whole)[i] + " ";
  ASSERT_EQ(testing::RunCli(args, &out), 0) << out;
  // SIGKILL, SIGTERM, SIGINT, SIGKILL at growing times, each followed by the user's next
  // command: --resume once a checkpoint exists, else the same command again.
  const int signals[] = {SIGKILL, SIGTERM, SIGINT, SIGKILL};
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> c = command(cut);
    if (std::filesystem::exists(dir / "cut/checkpoints/last.pt")) {
      c = {KEYCLD_CLI_PATH, "train", "--out", cut, "--resume"};
    }
    std::vector<char*> argv;
    for (auto& a : c) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1200 + 400 * i));
    ::kill(pid, signals[i]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // Killed, stopped by the signal (130, 143), or already finished (0): never an error.
    if (WIFEXITED(status)) {
      EXPECT_TRUE(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 130 ||
                  WEXITSTATUS(status) == 143)
          << "attempt " << i << ": exit " << WEXITSTATUS(status);
    }
  }
  args = "train --out " + cut + " --resume";
  if (!std::filesystem::exists(dir / "cut/checkpoints/last.pt")) {
    args.clear();
    for (size_t i = 1; i < command(cut).size(); ++i) args += command(cut)[i] + " ";
  }
  const int rc = testing::RunCli(args, &out);
  // The last kill may have come after the run had finished: then "nothing left to train".
  ASSERT_TRUE(rc == 0 || out.find("already") != std::string::npos) << out;
  // Same parameters, the same records once each and in order, the same losses.
  const auto a = Parameters(dir / "whole/checkpoints/last.pt");
  const auto b = Parameters(dir / "cut/checkpoints/last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  std::vector<int64_t> steps_a, steps_b, epochs_a, epochs_b;
  std::vector<double> loss_a, loss_b;
  ReadRecordOrder(dir / "whole/metrics.jsonl", &steps_a, &loss_a, &epochs_a);
  ReadRecordOrder(dir / "cut/metrics.jsonl", &steps_b, &loss_b, &epochs_b);
  EXPECT_EQ(steps_a, steps_b);
  EXPECT_EQ(loss_a, loss_b);
  EXPECT_EQ(epochs_a, epochs_b);
  EXPECT_EQ(epochs_a.size(), 12u);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "cut")) {
    EXPECT_NE(e.path().filename().string().rfind(".keycld-", 0), 0u) << e.path();
  }
}

TEST(Train, VptCountsFramesUntilTheErrorExceedsTheThreshold) {
  testing::TempDir dir;
  Dataset d = Dataset::Open(TinyData(dir.path()));
  ModelSpec spec;
  spec.hidden = 8;
  spec.image_size = 16;
  spec.dt = 0.02;
  Model model = CreateModel(spec);
  auto images = torch::from_blob(d.ReadImages(5).data(), {1, 10, 16, 16, 3}, torch::kUInt8).clone();
  auto actions = torch::zeros({1, 1});
  VptOptions o;
  o.rtol = o.atol = 1e-6;
  o.epsilon = 1e9;  // nothing exceeds it: the whole run is valid
  auto all = ValidPredictionTime(model, images, actions, o);
  EXPECT_EQ(all.vpt, std::vector<int>{9});
  o.epsilon = -1;  // everything exceeds it
  auto none = ValidPredictionTime(model, images, actions, o);
  EXPECT_EQ(none.vpt, std::vector<int>{0});
  // Threshold between frame errors: the VPT is the first frame above it.
  auto mse = all.mse[0];
  o.epsilon = mse[0].item<double>() * 1.000001;
  auto some = ValidPredictionTime(model, images, actions, o);
  int expected = 9;
  for (int t = 0; t < 10; ++t)
    if (mse[t].item<double>() > o.epsilon) {
      expected = t;
      break;
    }
  EXPECT_EQ(some.vpt[0], expected);
  EXPECT_EQ(all.predicted.sizes(), (std::vector<int64_t>{1, 10, 1, 2}));
}

}  // namespace
}  // namespace keycld

namespace keycld {
namespace {

TEST(TrainRun, RunGeneratesTheDataSetTrainsAndResumesWhenRepeated) {
  testing::TempDir dir;
  {
    std::ofstream cfg(dir / "tiny.toml");
    cfg << "[data]\nenv = \"pendulum\"\nsize = 16\nruns = 4\nframes = 8\n"
           "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
           "[eval]\nrtol = 1e-6\natol = 1e-6\n";
  }
  TrainConfig c = TrainConfig::FromToml(dir / "tiny.toml");
  EXPECT_EQ(c.DataFile(), std::filesystem::path("data/pendulum-none-16px-4x8-seed0.h5"));
  std::string out;
  ASSERT_EQ(testing::RunCli("run --config tiny.toml", &out, dir.path()), 0) << out;
  EXPECT_NE(out.find("wrote data/pendulum-none-16px-4x8-seed0.h5"), std::string::npos) << out;
  ASSERT_EQ(testing::RunCli("run --config tiny.toml", &out, dir.path()), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(dir / "data/pendulum-none-16px-4x8-seed0.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir / "runs/tiny/checkpoints/epoch-0001.pt"));
  // The second invocation found both and continued the finished run.
  EXPECT_NE(out.find("using data set"), std::string::npos) << out;
  EXPECT_NE(out.find("resuming"), std::string::npos) << out;

  // A config naming the data file: rerunning it continues the run (config.toml records the
  // file's own parameters, which must not count as a change) ...
  {
    std::ofstream cfg(dir / "named.toml");
    cfg << "[data]\nfile = \"data/pendulum-none-16px-4x8-seed0.h5\"\n"
           "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\n"
           "[eval]\nrtol = 1e-6\natol = 1e-6\n";
  }
  ASSERT_EQ(testing::RunCli("run --config named.toml --predict-frames 0", &out, dir.path()), 0)
      << out;
  ASSERT_EQ(testing::RunCli("run --config named.toml --predict-frames 0", &out, dir.path()), 0)
      << out;
  EXPECT_NE(out.find("resuming"), std::string::npos) << out;
  // ... while a changed key is refused, naming the key and both values.
  std::ofstream(dir / "named.toml")
      << "[data]\nfile = \"data/pendulum-none-16px-4x8-seed0.h5\"\n"
         "[model]\nhidden = 8\n[train]\nepochs = 1\nthreads = 2\nlr = 0.001\n"
         "[eval]\nrtol = 1e-6\natol = 1e-6\n";
  EXPECT_EQ(testing::RunCli("run --config named.toml --predict-frames 0", &out, dir.path()), 1);
  EXPECT_NE(out.find("(the config against the run: [train] lr: 0.001"), std::string::npos) << out;
  EXPECT_EQ(out.find("[data]"), std::string::npos) << out;  // only the key that changed
}

TEST(TrainRun, AnUnknownCommandSuggestsTheNearestOne) {
  testing::TempDir dir;
  std::string out;
  EXPECT_EQ(testing::RunCli("trian --epochs 3", &out, dir.path()), 2);
  EXPECT_NE(out.find("unknown command 'trian' (did you mean 'train'?)"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCli("--gl auto frobnicate", &out, dir.path()), 2);
  EXPECT_NE(out.find("unknown command 'frobnicate'; the commands are"), std::string::npos) << out;
  EXPECT_EQ(out.find("did you mean"), std::string::npos) << out;
  // The global --gl goes before or after the command.
  EXPECT_EQ(testing::RunCli("--gl auto info", &out, dir.path()), 0) << out;
  EXPECT_EQ(testing::RunCli("info --gl auto", &out, dir.path()), 0) << out;
  EXPECT_EQ(testing::RunCli("info --gl nonsense", &out, dir.path()), 2) << out;
}

}  // namespace
}  // namespace keycld

namespace keycld {
namespace {

// LibTorch's loader replaces a parameter by the stored tensor whatever its shape; a checkpoint
// whose tensors do not fit its spec (or hold NaN) must be refused when it is opened, not fail
// later inside a matrix product.
TEST(Checkpoint, ParametersOfTheWrongShapeOrNotFiniteAreRefusedAtLoad) {
  testing::TempDir dir;
  auto save_with = [&](const std::string& name, const std::function<void(Model&)>& spoil) {
    Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
    spoil(model);
    const auto file = dir / (name + ".pt");
    SaveCheckpoint(file, model, nullptr, TrainPosition{});
    return file;
  };
  auto parameter = [](Model& model, const std::string& name) {
    for (auto& p : model->named_parameters())
      if (p.key() == name) return p.value();
    throw std::runtime_error("no parameter " + name);
  };
  const auto good = save_with("good", [](Model&) {});
  EXPECT_NO_THROW(LoadModel(good, torch::kCPU));
  const auto shape = save_with("shape", [&](Model& m) {
    torch::NoGradGuard g;
    parameter(m, "potential.mlp.linear1.weight").set_data(torch::zeros({8, 5}));
  });
  try {
    LoadModel(shape, torch::kCPU);
    ADD_FAILURE() << "a parameter of the wrong shape was loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("'potential.mlp.linear1.weight' has shape [8, 5]"),
              std::string::npos)
        << e.what();
  }
  const auto nan = save_with("nan", [&](Model& m) {
    torch::NoGradGuard g;
    parameter(m, "estimator.head.weight").fill_(std::numeric_limits<float>::quiet_NaN());
  });
  EXPECT_THROW(LoadModel(nan, torch::kCPU), FormatError);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
  EXPECT_THROW(LoadCheckpoint(shape, model, nullptr, nullptr), FormatError);
}

}  // namespace
}  // namespace keycld
