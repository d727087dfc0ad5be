// The fused oneDNN U-Net (model/onednn_unet.h) against LibTorch's modules: the same outputs and
// the same gradients of the input, the renderer's seed and every parameter, for the keypoint
// estimator and the renderer, with direct and Winograd convolutions, for widths whose channel
// counts fill the 16-channel blocks and for h = 8, whose do not (padding lanes).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>
#include <vector>

#include "keycld/model/keypoint_estimator.h"
#include "keycld/model/onednn_unet.h"
#include "keycld/model/renderer.h"

namespace keycld {
namespace {

// Largest |a − b| relative to the largest |b| (a scale-free error of a whole tensor). A
// gradient that is zero in exact arithmetic (the bias of a convolution followed by a GroupNorm
// of one channel per group, h = 8) holds rounding noise only and is checked for being small.
double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-30, b.abs().max().item<double>());
}

// GroupNorm's initial γ = 1, β = 0 and the random images can leave a group almost constant,
// where a rounding of its mean flips single ReLU masks between the two paths (a difference of
// one element's gradient, a valid subgradient either way); random affine parameters avoid
// those knife edges, so the comparison can be tight.
template <class Net>
void RandomizeNorms(Net& net) {
  torch::NoGradGuard no_grad;
  for (auto& item : net->named_parameters()) {
    if (item.key().find("norm.weight") != std::string::npos) item.value().normal_(1.0, 0.3);
    if (item.key().find("norm.bias") != std::string::npos) item.value().normal_(0.0, 0.5);
  }
}

struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;  // input, then every parameter
};

template <class Net, class Call>
Result RunNet(Net& net, const at::Tensor& input, const at::Tensor& upstream, Call call) {
  for (auto& p : net->parameters()) p.mutable_grad() = at::Tensor();
  at::Tensor x = input.detach().clone().requires_grad_(true);
  at::Tensor out = call(x);
  std::vector<at::Tensor> inputs{x};
  for (auto& p : net->parameters()) inputs.push_back(p);
  auto grads = torch::autograd::grad({(out * upstream).sum()}, inputs);
  return {out.detach(), grads};
}

void ExpectClose(const Result& fused, const Result& ref, double tol, const std::string& what) {
  EXPECT_LT(RelativeError(fused.out, ref.out), tol) << what << ": output";
  ASSERT_EQ(fused.grads.size(), ref.grads.size());
  double scale = 0;
  for (const auto& g : ref.grads) scale = std::max(scale, g.abs().max().item<double>());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    ASSERT_TRUE(fused.grads[i].defined()) << what << ": gradient " << i;
    EXPECT_EQ(fused.grads[i].sizes(), ref.grads[i].sizes()) << what << ": gradient " << i;
    if (ref.grads[i].abs().max().item<double>() < 1e-5 * scale) {
      // Zero in exact arithmetic (see RelativeError): both must be rounding noise.
      EXPECT_LT(fused.grads[i].abs().max().item<double>(), 1e-4 * scale)
          << what << ": gradient " << i;
    } else {
      EXPECT_LT(RelativeError(fused.grads[i], ref.grads[i]), tol) << what << ": gradient " << i;
    }
  }
}

class OneDnnUNet : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(OneDnnUNet, EstimatorMatchesLibTorch) {
  if (!OneDnnUNetBuilt()) GTEST_SKIP() << "built without oneDNN";
  const auto [hidden, size, keypoints] = GetParam();
  at::manual_seed(7);
  KeypointEstimator net(keypoints, hidden);
  RandomizeNorms(net);
  const at::Tensor images = at::rand({3, 3, size, size});
  const at::Tensor upstream = at::randn({3, keypoints, size, size});
  auto with = [&](TrunkKernels k) {
    return RunNet(net, images, upstream,
                  [&](const at::Tensor& x) { return net->forward(x, {}, k); });
  };
  const Result ref = with(TrunkKernels::kLibTorch);
  const std::string what = "h " + std::to_string(hidden) + ", " + std::to_string(size) + " px";
  ExpectClose(with(TrunkKernels::kOneDnn), ref, 2e-5, what + ", direct");
  ExpectClose(with(TrunkKernels::kWinograd), ref, 2e-3, what + ", winograd");
}

TEST_P(OneDnnUNet, RendererMatchesLibTorch) {
  if (!OneDnnUNetBuilt()) GTEST_SKIP() << "built without oneDNN";
  const auto [hidden, size, keypoints] = GetParam();
  at::manual_seed(8);
  Renderer net(keypoints, hidden, size, size, 0.2);
  RandomizeNorms(net);
  const at::Tensor points = at::rand({3, keypoints, 2}) * 1.6 - 0.8;
  const at::Tensor upstream = at::randn({3, 3, size, size});
  auto with = [&](TrunkKernels k) {
    return RunNet(net, points, upstream, [&](const at::Tensor& x) { return net->forward(x, k); });
  };
  const Result ref = with(TrunkKernels::kLibTorch);
  const std::string what = "h " + std::to_string(hidden) + ", " + std::to_string(size) + " px";
  ExpectClose(with(TrunkKernels::kOneDnn), ref, 2e-5, what + ", direct");
  ExpectClose(with(TrunkKernels::kWinograd), ref, 2e-3, what + ", winograd");
}

INSTANTIATE_TEST_SUITE_P(Widths, OneDnnUNet,
                         ::testing::Values(std::make_tuple(8, 16, 1), std::make_tuple(16, 16, 2),
                                           std::make_tuple(16, 32, 1), std::make_tuple(24, 8, 3)));

// Without grad mode (inference) and for other dtypes the LibTorch modules run: same values.
TEST(OneDnnUNetChoice, OnlyTrainingOnFloat32CpuTakesTheFusedPath) {
  const at::Tensor x = at::rand({1, 3, 8, 8});
  EXPECT_EQ(UseOneDnnUNet(TrunkKernels::kWinograd, x), OneDnnUNetBuilt());
  EXPECT_FALSE(UseOneDnnUNet(TrunkKernels::kLibTorch, x));
  EXPECT_FALSE(UseOneDnnUNet(TrunkKernels::kWinograd, x.to(at::kDouble)));
  at::NoGradGuard no_grad;
  EXPECT_FALSE(UseOneDnnUNet(TrunkKernels::kWinograd, x));
}

}  // namespace
}  // namespace keycld
