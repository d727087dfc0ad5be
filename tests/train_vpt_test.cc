// VPT against hand-computed cases (docs/method.md §8): perfect predictor, mean-image predictor,
// a prediction that diverges at frame k.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "keycld/model/dihedral.h"
#include "keycld/models/registry.h"
#include "keycld/train/config.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"
#include "tiny_fixtures.h"

namespace keycld {
namespace {

// Per-frame MSE [R, N] between predicted and true videos [R, N, P].
torch::Tensor FrameMse(const torch::Tensor& predicted, const torch::Tensor& truth) {
  return (predicted - truth).square().mean(2).to(torch::kFloat64);
}

// ε of docs/method.md §8 from videos [R, N, P]: mean over runs of the MSE between a run's frames
// and the mean image (mean over runs of each run's time-averaged image).
double Epsilon(const torch::Tensor& videos) {
  torch::Tensor mean_image = videos.mean(1).mean(0);
  return (videos - mean_image).square().mean().item<double>();
}

TEST(Vpt, APerfectPredictorScoresTheLastFrame) {
  torch::manual_seed(1);
  torch::Tensor truth = torch::rand({4, 50, 12});
  VptResult r = VptFromMse(FrameMse(truth, truth), Epsilon(truth));
  EXPECT_EQ(r.vpt, std::vector<int>(4, 49));
  EXPECT_DOUBLE_EQ(r.mean, 49.0);
  EXPECT_DOUBLE_EQ(r.std, 0.0);
  EXPECT_DOUBLE_EQ(r.median, 49.0);
}

TEST(Vpt, TheMeanImagePredictorScoresZeroOnRunsFartherThanEpsilon) {
  // Runs of constant images a, b and m = (a + b) / 2: the mean image is m, ε = 2/3 · |a − m|²,
  // so predicting m fails at frame 0 for the a and b runs and never for the m run.
  const int64_t N = 20, P = 8;
  torch::Tensor a = torch::full({P}, 0.2), b = torch::full({P}, 0.8), m = (a + b) / 2;
  torch::Tensor truth = torch::stack({a.expand({N, P}), b.expand({N, P}), m.expand({N, P})});
  const double eps = Epsilon(truth);
  EXPECT_NEAR(eps, 2.0 / 3.0 * 0.09, 1e-7);
  torch::Tensor predicted = m.expand({3, N, P});
  VptResult r = VptFromMse(FrameMse(predicted, truth), eps);
  EXPECT_EQ(r.vpt, (std::vector<int>{0, 0, int(N - 1)}));
  EXPECT_NEAR(r.mean, (N - 1) / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.median, 0.0);
}

TEST(Vpt, APredictionThatDivergesAtFrameKScoresK) {
  torch::manual_seed(2);
  const int64_t N = 50;
  torch::Tensor truth = torch::rand({3, N, 16});
  const double eps = Epsilon(truth);
  const std::vector<int> diverge_at{0, 7, 31};
  torch::Tensor predicted = truth.clone();
  for (int r = 0; r < 3; ++r) {
    // Small error before frame k (well under ε), then a large one growing with time.
    predicted[r].slice(0, 0, diverge_at[r]) += 0.1 * std::sqrt(eps);
    for (int64_t t = diverge_at[r]; t < N; ++t) predicted[r][t] += 2.0 * (t + 1) * std::sqrt(eps);
  }
  VptResult r = VptFromMse(FrameMse(predicted, truth), eps);
  EXPECT_EQ(r.vpt, diverge_at);
  EXPECT_NEAR(r.mean, 38.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(r.median, 7.0);
  const double var =
      (std::pow(0 - 38.0 / 3, 2) + std::pow(7 - 38.0 / 3, 2) + std::pow(31 - 38.0 / 3, 2)) / 3.0;
  EXPECT_NEAR(r.std, std::sqrt(var), 1e-12);
}

TEST(Vpt, ANonFiniteErrorEndsTheValidTime) {
  torch::Tensor mse = torch::zeros({1, 10}, torch::kFloat64);
  mse[0][4] = std::nan("");
  EXPECT_EQ(VptFromMse(mse, 1.0).vpt, std::vector<int>{4});
  EXPECT_THROW(VptFromMse(torch::zeros({5}), 1.0), InputError);
}

}  // namespace
}  // namespace keycld

namespace keycld {
namespace {

TEST(LearningRateSchedule, CosineDecaysFromOneToTheFinalScale) {
  TrainConfig c;
  EXPECT_DOUBLE_EQ(c.LearningRateFactor(123, 1000), 1.0);  // the paper: constant
  c.lr_schedule = "cosine";
  c.lr_final_scale = 0.1;
  EXPECT_DOUBLE_EQ(c.LearningRateFactor(0, 1000), 1.0);
  EXPECT_NEAR(c.LearningRateFactor(500, 1000), 0.55, 1e-12);  // half way: (1 + f) / 2
  EXPECT_NEAR(c.LearningRateFactor(250, 1000), 0.1 + 0.9 * 0.5 * (1 + std::sqrt(0.5)), 1e-12);
  EXPECT_NEAR(c.LearningRateFactor(1000, 1000), 0.1, 1e-12);
  EXPECT_NEAR(c.LearningRateFactor(5000, 1000), 0.1, 1e-12);  // past the end: stays final
  c.lr_decay_start = 0.5;  // constant for the first half, then the cosine over the second
  EXPECT_DOUBLE_EQ(c.LearningRateFactor(499, 1000), 1.0);
  EXPECT_NEAR(c.LearningRateFactor(750, 1000), 0.55, 1e-12);
  EXPECT_NEAR(c.LearningRateFactor(1000, 1000), 0.1, 1e-12);
  c.lr_decay_start = 1.0;
  EXPECT_THROW(c.Validate(), InputError);
  c.lr_decay_start = 0.0;
  EXPECT_EQ(c.TotalSteps(450), 40 * 450);
  c.max_steps = 777;
  EXPECT_EQ(c.TotalSteps(450), 777);
  c.lr_schedule = "linear";
  EXPECT_THROW(c.Validate(), InputError);
  c.lr_schedule = "cosine";
  c.lr_final_scale = 1.5;
  EXPECT_THROW(c.Validate(), InputError);
}

// Render and compare (train/vpt.h, StartEstimate): frames rendered by the model itself from a
// rollout of its own dynamics are matched by the true start state, so refining a perturbed
// start must move it back towards the truth and lower the objective.
TEST(StartEstimate, RecoversTheStartStateOfTheModelsOwnRenders) {
  torch::manual_seed(0);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
  model->eval();
  const double dt = model->spec().dt;
  torch::NoGradGuard no_grad;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor x0 = torch::tensor({{0.15, -0.25}}, f64), v0 = torch::tensor({{1.5, 0.6}}, f64);
  torch::Tensor u = torch::zeros({1, 1}, f64);
  PhaseState truth;
  torch::Tensor frames;
  {
    DoublePrecisionDynamics fp64(model);
    v0 = model->ProjectVelocity(x0, v0);
    IntegratorOptions io;
    io.substeps = 50;
    Trajectory traj = model->Rollout(x0, v0, u, {0.0, dt, 2 * dt}, IntegratorMethod::kRk4, io);
    truth = {traj.x.select(1, 1), traj.xdot.select(1, 1)};
    frames = traj.x;
  }
  frames = model->Render(frames.reshape({3, 1, 2}).to(torch::kFloat32)).unsqueeze(0);
  // About half a pixel off in position (16-px images: 8 px per unit) and 0.3 units/s in speed.
  PhaseState perturbed{truth.x + torch::tensor({{0.05, -0.04}}, f64),
                       truth.xdot + torch::tensor({{-0.3, 0.2}}, f64)};
  StartEstimate start_estimate;
  start_estimate.refine_steps = 300;
  start_estimate.refine_lr = 2e-3;
  double before = 0, after = 0;
  torch::Tensor x0_refined;
  PhaseState r = RefineStartState(model, frames, perturbed, u.to(torch::kFloat32), start_estimate,
                                  &x0_refined, &before, &after);
  EXPECT_LT(after, 0.05 * before);
  const double e_before = (perturbed.x - truth.x).norm().item<double>();
  const double e_after = (r.x - truth.x).norm().item<double>();
  EXPECT_LT(e_after, 0.2 * e_before) << "x1 error " << e_before << " -> " << e_after;
  EXPECT_LT((r.xdot - truth.xdot).norm().item<double>(),
            0.5 * (perturbed.xdot - truth.xdot).norm().item<double>());
  EXPECT_LT((x0_refined.to(torch::kFloat64) - x0).norm().item<double>(), 0.2 * e_before);
  EXPECT_EQ(r.x.scalar_type(), torch::kFloat64);

  // Zero steps leave the start as it was (the paper's protocol); bad options are refused.
  start_estimate.refine_steps = 0;
  PhaseState same =
      RefineStartState(model, frames, perturbed, u.to(torch::kFloat32), start_estimate);
  EXPECT_TRUE(torch::allclose(same.x, perturbed.x, 0, 1e-6));
  start_estimate.refine_steps = -1;
  EXPECT_THROW(RefineStartState(model, frames, perturbed, u.to(torch::kFloat32), start_estimate),
               InputError);
  start_estimate.refine_steps = 10;
  start_estimate.refine_lr = 0;
  EXPECT_THROW(RefineStartState(model, frames, perturbed, u.to(torch::kFloat32), start_estimate),
               InputError);
  start_estimate.refine_lr = 1e-3;
  EXPECT_THROW(RefineStartState(model, frames.slice(1, 0, 2), perturbed, u.to(torch::kFloat32),
                                start_estimate),
               InputError);
}

// The dihedral average (StartEstimate::dihedral_average) is an average over the group, so it is
// exactly equivariant for any estimator, trained or not: the average of a transformed frame is
// the transformed average. A single estimate of an untrained network is not.
TEST(StartEstimate, TheDihedralAverageIsEquivariant) {
  torch::manual_seed(2);
  Model model = CreateModel(testing::TinyModelSpec(EnvName::kPendulum));
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor frames = torch::rand({2, 3, 3, 16, 16});  // [R, F, 3, H, W]
  torch::Tensor mean = EstimateKeypoints(model, frames, true).reshape({2, 3, 1, 2});
  torch::Tensor plain = EstimateKeypoints(model, frames, false).reshape({2, 3, 1, 2});
  double plain_gap = 0;
  for (int t = 1; t < 8; ++t) {
    torch::Tensor moved = DihedralTransform(frames, t);
    torch::Tensor expected = DihedralTransformKeypoints(mean, t);
    torch::Tensor got = EstimateKeypoints(model, moved, true).reshape({2, 3, 1, 2});
    EXPECT_TRUE(torch::allclose(got, expected, 0, 1e-5)) << "transform " << t;
    torch::Tensor plain_moved = EstimateKeypoints(model, moved, false).reshape({2, 3, 1, 2});
    plain_gap = std::max(
        plain_gap, (plain_moved - DihedralTransformKeypoints(plain, t)).abs().max().item<double>());
  }
  EXPECT_GT(plain_gap, 1e-3);  // the check above could fail
  EXPECT_THROW(EstimateKeypoints(model, frames.select(1, 0), true), InputError);
}

}  // namespace
}  // namespace keycld
