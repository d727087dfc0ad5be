// VPT against hand-computed cases (docs/method.md §8): perfect predictor, mean-image predictor,
// a prediction that diverges at frame k.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "keycld/train/config.h"
#include "keycld/train/vpt.h"
#include "keycld/util/error.h"

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

}  // namespace
}  // namespace keycld
