// Tests of the spatial softmax, Gaussian maps and heatmap loss (KeyCLD §2, §3, §6).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "keycld/model/keypoints.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

// Normalized coordinates of pixel (row, col) of an H×W image, computed independently.
std::pair<double, double> PixelCoordinates(int64_t row, int64_t col, int64_t h, int64_t w) {
  return {-1.0 + 2.0 * col / (w - 1), 1.0 - 2.0 * row / (h - 1)};
}

TEST(ModelKeypoints, SpatialSoftmaxOfAPeakReturnsThatPixel) {
  const int64_t h = 16, w = 12;  // non-square on purpose: the grids are per axis
  const std::vector<std::pair<int64_t, int64_t>> pixels = {{0, 0},         {0, w - 1}, {h - 1, 0},
                                                           {h - 1, w - 1}, {5, 7},     {10, 2}};
  at::Tensor logits = at::zeros({1, static_cast<int64_t>(pixels.size()), h, w});
  for (size_t k = 0; k < pixels.size(); ++k) {
    logits[0][k][pixels[k].first][pixels[k].second] = 1e4;  // exp(−1e4) underflows to 0
  }
  const SpatialSoftmaxResult result = SpatialSoftmax(logits);
  ASSERT_EQ(result.keypoints.sizes(), (at::IntArrayRef{1, 6, 2}));
  ASSERT_EQ(result.probabilities.sizes(), logits.sizes());
  at::Tensor xs = at::linspace(-1.0, 1.0, w), ys = at::linspace(1.0, -1.0, h);
  for (size_t k = 0; k < pixels.size(); ++k) {
    const auto [row, col] = pixels[k];
    // Exactly the grid value (a one-hot sum), and that is the analytic pixel coordinate.
    EXPECT_EQ(result.keypoints[0][k][0].item<float>(), xs[col].item<float>()) << "k=" << k;
    EXPECT_EQ(result.keypoints[0][k][1].item<float>(), ys[row].item<float>()) << "k=" << k;
    const auto [x, y] = PixelCoordinates(row, col, h, w);
    EXPECT_NEAR(result.keypoints[0][k][0].item<float>(), x, 1e-6);
    EXPECT_NEAR(result.keypoints[0][k][1].item<float>(), y, 1e-6);
  }
  // The top-left pixel is (−1, +1) exactly.
  EXPECT_EQ(result.keypoints[0][0][0].item<float>(), -1.0f);
  EXPECT_EQ(result.keypoints[0][0][1].item<float>(), 1.0f);
}

TEST(ModelKeypoints, SpatialSoftmaxProbabilitiesSumToOneAndUniformGivesCentre) {
  at::manual_seed(1);
  const SpatialSoftmaxResult random = SpatialSoftmax(at::randn({2, 3, 8, 8}));
  EXPECT_TRUE(at::allclose(random.probabilities.sum({-2, -1}), at::ones({2, 3})));
  const SpatialSoftmaxResult uniform = SpatialSoftmax(at::zeros({1, 1, 8, 8}));
  EXPECT_NEAR(uniform.keypoints[0][0][0].item<float>(), 0.0, 1e-6);
  EXPECT_NEAR(uniform.keypoints[0][0][1].item<float>(), 0.0, 1e-6);
}

TEST(ModelKeypoints, SpatialSoftmaxRejectsBadInput) {
  EXPECT_THROW(SpatialSoftmax(at::zeros({4, 4})), InputError);
  EXPECT_THROW(SpatialSoftmax(at::zeros({1, 1, 4, 4}, at::kLong)), InputError);
}

TEST(ModelKeypoints, GaussianMapPeaksAtItsPixelWithAnalyticNeighbour) {
  const int64_t h = 16, w = 16, row = 5, col = 9;
  const double sigma = 0.1;
  const auto [x, y] = PixelCoordinates(row, col, h, w);
  at::Tensor keypoints = at::tensor({x, y}, at::kDouble).view({1, 1, 2});
  at::Tensor maps = GaussianMaps(keypoints, h, w, sigma);
  ASSERT_EQ(maps.sizes(), (at::IntArrayRef{1, 1, h, w}));
  EXPECT_NEAR(maps[0][0][row][col].item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(maps.max().item<double>(), 1.0, 1e-12);
  EXPECT_EQ(maps.flatten().argmax().item<int64_t>(), row * w + col);
  const double dx = 2.0 / (w - 1), dy = 2.0 / (h - 1);
  const double right = std::exp(-dx * dx / (2 * sigma * sigma));
  const double diagonal = std::exp(-(dx * dx + dy * dy) / (2 * sigma * sigma));
  EXPECT_NEAR(maps[0][0][row][col + 1].item<double>(), right, 1e-12);
  EXPECT_NEAR(maps[0][0][row - 1][col - 1].item<double>(), diagonal, 1e-12);
  // float32 keypoints give float32 maps with the same values.
  at::Tensor maps32 = GaussianMaps(keypoints.to(at::kFloat), h, w, sigma);
  EXPECT_EQ(maps32.scalar_type(), at::kFloat);
  EXPECT_NEAR(maps32[0][0][row][col + 1].item<float>(), right, 1e-6);
}

TEST(ModelKeypoints, GaussianMapsRejectBadInput) {
  EXPECT_THROW(GaussianMaps(at::zeros({1, 2, 3}), 8, 8), InputError);
  EXPECT_THROW(GaussianMaps(at::zeros({1, 2, 2}), 8, 8, 0.0), InputError);
  EXPECT_THROW(GaussianMaps(at::zeros({1, 2, 2}), 0, 8), InputError);
}

TEST(ModelKeypoints, HeatmapBceMatchesHandComputation) {
  // One 2×2 map: pixel centres x ∈ {−1, 1}, y ∈ {1, −1}; the keypoint at the top-left pixel.
  const double sigma = 1.0, eps = 1e-4;
  at::Tensor p = at::tensor({0.1, 0.2, 0.3, 0.4}, at::kDouble).view({1, 1, 2, 2});
  p.requires_grad_(true);
  at::Tensor keypoints = at::tensor({-1.0, 1.0}, at::kDouble).view({1, 1, 2});
  keypoints.requires_grad_(true);
  const double pn[4] = {0.25, 0.5, 0.75, 1.0};  // p / max p
  // Squared distances from (−1, 1) to (−1, 1), (1, 1), (−1, −1), (1, −1).
  const double d2[4] = {0.0, 4.0, 4.0, 8.0};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    const double y = std::exp(-d2[i] / (2 * sigma * sigma));
    sum += y * std::log(pn[i] + eps) + (1 - y) * std::log(1 - pn[i] + eps);
  }
  const double expected = -sum / 4;
  at::Tensor loss = HeatmapBce(p, keypoints, sigma, eps);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item<double>(), expected, 1e-12);
  loss.backward();
  ASSERT_TRUE(p.grad().defined());
  EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0);
  // The target is detached: no gradient reaches the keypoints.
  EXPECT_FALSE(keypoints.grad().defined() && keypoints.grad().abs().sum().item<double>() > 0);
}

TEST(ModelKeypoints, HeatmapBceRejectsMismatchedShapes) {
  EXPECT_THROW(HeatmapBce(at::ones({1, 2, 4, 4}), at::zeros({1, 3, 2})), InputError);
  EXPECT_THROW(HeatmapBce(at::ones({1, 2, 4, 4}), at::zeros({2, 2, 2})), InputError);
}

}  // namespace
}  // namespace keycld
