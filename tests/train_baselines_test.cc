// The Lagrangian VAE baselines lag-vae and lag-cavae (docs/baselines.md) in the harness: the
// published network shapes, their windowed objective computed by hand, a tiny training of every
// baseline (HGN too) that lowers its loss, a resume that is exact, and evaluate / predict on a
// trained baseline.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "keycld/data/dataset.h"
#include "keycld/eval/evaluate.h"
#include "keycld/eval/predict.h"
#include "keycld/models/lag_vae_model.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/config.h"
#include "keycld/train/loss.h"
#include "keycld/train/metrics.h"
#include "keycld/train/trainer.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "test_util.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

constexpr const char* kBaselines[] = {"lag-vae", "lag-cavae"};

torch::Tensor TinyImages(const std::filesystem::path& data, int run = 0) {
  Dataset d = Dataset::Open(data);
  const int64_t N = d.info().frames, S = d.info().size;
  return ImagesToFloat(
      torch::from_blob(d.ReadImages(run).data(), {N, S, S, 3}, torch::kUInt8).clone(), torch::kCPU);
}

TEST(Baselines, PublishedShapesAndOnlyThePendulum) {
  for (const char* kind : kBaselines) {
    ModelSpec spec = testing::TinyModelSpec(EnvName::kPendulum, kind);  // 16 px
    Model model = CreateModel(spec);
    auto p = model->named_parameters();
    EXPECT_EQ(p["encoder.0.weight"].sizes(), (std::vector<int64_t>{300, 3 * 16 * 16})) << kind;
    EXPECT_EQ(p["encoder.2.weight"].sizes(), (std::vector<int64_t>{300, 300}));
    EXPECT_EQ(p["encoder.4.weight"].sizes(), (std::vector<int64_t>{3, 300}));
    EXPECT_EQ(p["lagrangian.mass.l1.weight"].sizes(), (std::vector<int64_t>{50, 2}));
    EXPECT_EQ(p["lagrangian.potential.l3.weight"].sizes(), (std::vector<int64_t>{1, 50}));
    EXPECT_EQ(p["lagrangian.input_gain.l3.weight"].sizes(), (std::vector<int64_t>{1, 50}));
    if (std::string(kind) == "lag-cavae") {
      EXPECT_EQ(p["sprite.0.weight"].sizes(), (std::vector<int64_t>{100, 1}));
      EXPECT_EQ(p["sprite.4.weight"].sizes(), (std::vector<int64_t>{4 * 16 * 16, 100}));
      EXPECT_EQ(p["background"].sizes(), (std::vector<int64_t>{3, 16, 16}));
      EXPECT_EQ(p["pivot"].sizes(), (std::vector<int64_t>{2}));
    } else {
      EXPECT_EQ(p["decoder.0.weight"].sizes(), (std::vector<int64_t>{100, 2}));
      EXPECT_EQ(p["decoder.4.weight"].sizes(), (std::vector<int64_t>{3 * 16 * 16, 100}));
    }
    EXPECT_FALSE(model->HasEnergy());
    EXPECT_FALSE(model->StatesAreImageKeypoints());
    EXPECT_EQ(model->PerceptionParameters().size() + model->DynamicsParameters().size(),
              model->parameters().size());
    // Encode gives unit (cos q, sin q) and no heatmaps; Render gives images in (0, 1).
    torch::NoGradGuard no_grad;
    Encoding e = model->Encode(torch::rand({4, 3, 16, 16}));
    EXPECT_EQ(e.keypoints.sizes(), (std::vector<int64_t>{4, 1, 2}));
    EXPECT_LT((e.keypoints.norm(2, 2) - 1).abs().max().item<double>(), 1e-6);
    EXPECT_FALSE(e.heatmaps.defined());
    torch::Tensor r = model->Render(e.keypoints);
    EXPECT_EQ(r.sizes(), (std::vector<int64_t>{4, 3, 16, 16}));
    EXPECT_GT(r.min().item<double>(), 0.0);
    EXPECT_LT(r.max().item<double>(), 1.0);
    // Only the pendulum (one angle).
    try {
      CreateModel(testing::TinyModelSpec(EnvName::kCartpole, kind));
      ADD_FAILURE() << kind << " accepted the cartpole";
    } catch (const InputError& err) {
      EXPECT_NE(std::string(err.what()).find("pendulum"), std::string::npos) << err.what();
    }
    EXPECT_FALSE(ModelSupportsSystem(kind, EnvName::kAcrobot));
    EXPECT_TRUE(ModelSupportsSystem(kind, EnvName::kPendulum));
  }
}

TEST(Baselines, TheWindowedObjectiveIsTheOneWrittenOutByHand) {
  torch::manual_seed(2);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum, "lag-cavae"));
  auto* vae = dynamic_cast<LagVaeModelImpl*>(model.get());
  ASSERT_NE(vae, nullptr);
  torch::NoGradGuard no_grad;
  const int64_t N = 8, P = 3, W = N - P;
  torch::Tensor images = torch::rand({N, 3, 16, 16});
  torch::Tensor u = torch::tensor({0.3});
  LossOptions lo;
  lo.horizon = int(P);
  lo.noise_seed = 9;
  lo.w_kl = 0.7;
  lo.w_norm = 0.2;
  LossTerms got = SequenceLoss(model, images, u, {}, lo);
  // By hand: the same draws, one Euler step per frame of (cos q, sin q, q̇).
  AnglePosterior post = vae->Posterior(images);
  torch::Tensor mu = post.mean / post.mean.norm(2, 1, true);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  torch::Tensor cs = SampleVonMisesFisher(mu.slice(0, 0, W), post.kappa.slice(0, 0, W), gen);
  const double dt = model->spec().dt;
  // q̇₀ = sin(Δq)/Δt of the first two means (the published difference formula).
  torch::Tensor w = (mu.slice(0, 1, W + 1).select(1, 1) * mu.slice(0, 0, W).select(1, 0) -
                     mu.slice(0, 1, W + 1).select(1, 0) * mu.slice(0, 0, W).select(1, 1)) /
                    dt;
  double sse = 0;
  for (int64_t j = 0; j <= P; ++j) {
    torch::Tensor frames = images.slice(0, j, j + W);
    sse += (model->Render(cs.unsqueeze(1)) - frames).square().sum().item<double>();
    torch::Tensor qdd = vae->lagrangian()->AngleAcceleration(cs, w, u);
    torch::Tensor next = torch::stack(
        {cs.select(1, 0) - dt * cs.select(1, 1) * w, cs.select(1, 1) + dt * cs.select(1, 0) * w},
        1);
    w = w + dt * qdd;
    cs = next;
  }
  const double kl = VonMisesFisherKl(post.kappa.slice(0, 0, W)).mean().item<double>();
  const double norm = std::pow(post.mean.slice(0, 0, W).norm(2, 1).mean().item<double>() - 1, 2);
  EXPECT_NEAR(got.reconstruction.item<double>(), sse / double(W), 1e-4 * sse / double(W));
  EXPECT_NEAR(got.kl.item<double>(), kl, 1e-6 * (1 + kl));
  EXPECT_NEAR(got.total.item<double>(), sse / double(W) + 0.7 * kl + 0.2 * norm,
              1e-4 * (1 + sse / double(W)));
  // Another seed draws other samples (the seed is used).
  lo.noise_seed = 10;
  EXPECT_NE(SequenceLoss(model, images, u, {}, lo).reconstruction.item<double>(),
            got.reconstruction.item<double>());
  // Refused: too short a sequence, an integrator the baselines do not train with.
  LossOptions bad = lo;
  bad.horizon = int(N);
  EXPECT_THROW(SequenceLoss(model, images, u, {}, bad), InputError);
  bad = lo;
  bad.integrator = IntegratorMethod::kVerlet;
  EXPECT_THROW(SequenceLoss(model, images, u, {}, bad), InputError);
}

// Every baseline, HGN included (its encoder reads 32 × 32 frames).
TEST(Baselines, ATinyTrainingLowersTheLossAndResumesExactly) {
  testing::TempDir dir;
  const auto data16 = testing::TinyPendulumData(dir.path());
  const auto data32 = testing::TinyPendulumData(dir.path(), 32);
  for (const char* kind : {"lag-vae", "lag-cavae", "hgn"}) {
    const std::string k = kind;
    const int size = k == "hgn" ? 32 : 16;
    const auto data = size == 32 ? data32 : data16;
    const torch::Tensor images = TinyImages(data);
    auto opt = testing::BaselineTrainOptions(data, dir / (k + "-long"), k);
    opt.config.epochs = 8;
    LossOptions lo;
    lo.noise_seed = 1;
    auto loss_of = [&](Model m) {
      torch::NoGradGuard g;
      return SequenceLoss(m, images, torch::zeros({1}), {}, lo).total.item<double>();
    };
    torch::manual_seed(opt.config.seed);
    ModelSpec spec = testing::TinyModelSpec(EnvName::kPendulum, k);
    spec.image_size = size;
    const double before = loss_of(CreateModel(spec));
    TrainSummary s = Train(opt);
    EXPECT_EQ(s.steps, 8 * 5);
    const double after = loss_of(LoadModel(s.checkpoint, torch::kCPU));
    EXPECT_LT(after, 0.8 * before) << k << ": before " << before << ", after " << after;
    // The metrics carry the KL term.
    const MetricsHistory h = ReadMetrics(dir / (k + "-long") / "metrics.jsonl");
    ASSERT_EQ(h.steps.size(), 40u);
    EXPECT_TRUE(h.steps.back().kl.has_value());
    EXPECT_GE(*h.steps.back().kl, 0.0);

    // Interrupted after 3 steps and resumed to 8 equals 8 steps straight (the posterior samples
    // come from the checkpointed stream).
    auto [a, b] =
        testing::StraightAndResumed(testing::BaselineTrainOptions(data, dir / k, k), 3, 8);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << k << " " << i;
  }
}

// The configuration says up front what the baselines' objective does not take.
TEST(Baselines, ConfigRefusesAugmentationAndIntegratorsTheObjectiveDoesNotTake) {
  for (const char* kind : kBaselines) {
    TrainConfig c;
    c.model = kind;
    EXPECT_THROW(c.Validate(), InputError) << kind << ": augment is on by default";
    c.augment = false;
    EXPECT_NO_THROW(c.Validate());
    c.integrator = "rk4";
    EXPECT_NO_THROW(c.Validate());
    c.integrator = "verlet";
    EXPECT_THROW(c.Validate(), InputError);
    c.integrator = "euler";
    c.warmup_integrator = "verlet";
    c.integrator_warmup_epochs = 1;
    EXPECT_THROW(c.Validate(), InputError);
    c.integrator_warmup_epochs = 0;  // no warm-up: the warm-up integrator is never used
    EXPECT_NO_THROW(c.Validate());
  }
  TrainConfig keycld;  // KeyCLD takes all of them
  keycld.integrator = "verlet";
  EXPECT_NO_THROW(keycld.Validate());
}

TEST(Baselines, EvaluateAndPredictSayWhatDoesNotApply) {
  testing::TempDir dir;
  const auto data = testing::TinyPendulumData(dir.path());
  auto opt = testing::BaselineTrainOptions(data, dir / "run", "lag-cavae");
  opt.config.epochs = 1;
  Train(opt);
  EvaluateOptions eo;
  eo.run_dir = dir / "run";
  eo.energy_frames = 20;
  eo.threads = 2;
  EvaluationReport r = Evaluate(eo);
  EXPECT_FALSE(r.image_keypoints);
  EXPECT_EQ(r.vpt.vpt.size(), 1u);
  std::ifstream md(dir / "run/report/evaluation.md");
  std::stringstream text;
  text << md.rdbuf();
  EXPECT_NE(text.str().find("generalised coordinates"), std::string::npos) << text.str();
  EXPECT_NE(FormatEvaluationSummary(r).find("generalised coordinates"), std::string::npos);
  EXPECT_FALSE(std::isfinite(r.energy_relative_variation));  // n/a, not 0
  EXPECT_NE(FormatEvaluationSummary(r).find("masses m_k             n/a"), std::string::npos)
      << FormatEvaluationSummary(r);
  // Every checkpoint: VPT per epoch, no acceleration plot (there is no acceleration check).
  eo.out_dir = dir / "all";
  const std::vector<CheckpointRow> rows = EvaluateCheckpoints(eo);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(std::filesystem::exists(dir / "all/checkpoints.md"));
  EXPECT_TRUE(std::filesystem::exists(dir / "all/checkpoints_vpt.png"));
  EXPECT_FALSE(std::filesystem::exists(dir / "all/checkpoints_acceleration.png"));
  PredictOptions po;
  po.run_dir = dir / "run";
  po.frames = 10;
  po.threads = 2;
  po.progress = false;
  PredictionOutput p = WritePrediction(po);
  EXPECT_TRUE(std::filesystem::exists(p.gif));
  EXPECT_EQ(p.frames, 10);
}

// Every preset shipped in configs/ loads and validates, and a model's own preset trains on the
// same data set as its setting's preset (what the benchmark requires).
TEST(Baselines, EveryShippedPresetLoadsAndBaselinePresetsShareTheSettingsData) {
  int files = 0, own = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(DefaultConfigsDir())) {
    if (e.path().extension() != ".toml") continue;
    ++files;
    TrainConfig c;
    ASSERT_NO_THROW(c = TrainConfig::FromToml(e.path())) << e.path();
    EXPECT_NO_THROW(c.Validate()) << e.path();
    const std::string stem = e.path().stem().string();
    for (const char* kind : {"lag-vae", "lag-cavae", "hgn"}) {
      const std::string suffix = std::string("-") + kind;
      if (stem.size() <= suffix.size() || stem.substr(stem.size() - suffix.size()) != suffix) {
        continue;
      }
      ++own;
      EXPECT_EQ(c.model, kind) << e.path();
      EXPECT_FALSE(c.augment) << e.path();
      const auto setting =
          e.path().parent_path() / (stem.substr(0, stem.size() - suffix.size()) + ".toml");
      ASSERT_TRUE(std::filesystem::exists(setting)) << setting;
      EXPECT_EQ(TrainConfig::FromToml(setting).DataFile(), c.DataFile()) << e.path();
    }
  }
  EXPECT_GE(files, 16);
  // {cpu-quick, paper} × ({none, full} × {lag-vae, lag-cavae} + {pendulum, cartpole, acrobot}
  // unactuated × hgn)
  EXPECT_EQ(own, 14);
}

}  // namespace
}  // namespace keycld
