// Tests of the networks of KeyCLD §3: U-Net trunk, keypoint estimator, renderer, potential
// energy, input matrix and mass matrix.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "keycld/model/keypoint_estimator.h"
#include "keycld/model/mechanics.h"
#include "keycld/model/renderer.h"
#include "keycld/model/unet.h"
#include "keycld/util/error.h"

namespace keycld {
namespace {

constexpr int64_t kK = 2, kH = 8, kSize = 16;

TEST(ModelNetworks, UNetTrunkShapeAndSizeChecks) {
  at::manual_seed(10);
  UNetTrunk trunk(3, kH);
  at::Tensor out = trunk->forward(at::rand({2, 3, kSize, kSize}));
  EXPECT_EQ(out.sizes(), (at::IntArrayRef{2, kH, kSize, kSize}));
  EXPECT_GE(out.min().item<float>(), 0.0f);  // ends in ReLU
  EXPECT_EQ(trunk->forward(at::rand({1, 3, 12, 20})).sizes(), (at::IntArrayRef{1, kH, 12, 20}));
  EXPECT_THROW(trunk->forward(at::rand({1, 3, 18, 16})), InputError);
  EXPECT_THROW(trunk->forward(at::rand({1, 3, 16, 14})), InputError);
  EXPECT_THROW(trunk->forward(at::rand({1, 4, 16, 16})), InputError);
  EXPECT_THROW(UNetTrunk(3, 12), InputError);  // GroupNorm needs h divisible by 8
  // Parameter count of the trunk: 5 blocks of conv (9·in·out + out) and GroupNorm (2·out).
  auto block = [](int64_t in, int64_t out) { return 9 * in * out + out + 2 * out; };
  const int64_t h = kH;
  const int64_t expected =
      block(3, h) + block(h, 2 * h) + block(2 * h, 4 * h) + block(6 * h, 2 * h) + block(3 * h, h);
  int64_t count = 0;
  for (const auto& p : trunk->parameters()) count += p.numel();
  EXPECT_EQ(count, expected);
}

// Conv2dForward sends every CPU float32 convolution to oneDNN; LibTorch's own kernel
// (conv->forward for batch 1 and small inputs) must give the same values and gradients.
TEST(ModelNetworks, OneDnnConvolutionMatchesLibTorchsConvolution) {
  at::manual_seed(3);
  for (const auto& [batch, in, out, size] : std::vector<std::array<int64_t, 4>>{
           {1, 3, 8, 16}, {1, 16, 32, 8}, {2, 24, 8, 16}, {1, 8, 1, 16}}) {
    torch::nn::Conv2d conv(torch::nn::Conv2dOptions(in, out, 3).padding(1));
    at::Tensor x = at::randn({batch, in, size, size}).requires_grad_(true);
    at::Tensor y_ref = conv->forward(x);
    at::Tensor w = at::randn_like(y_ref);
    auto g_ref = torch::autograd::grad({(y_ref * w).sum()}, {x, conv->weight, conv->bias});
    at::Tensor y = Conv2dForward(conv, x);
    auto g = torch::autograd::grad({(y * w).sum()}, {x, conv->weight, conv->bias});
    EXPECT_EQ(y.sizes(), y_ref.sizes());
    EXPECT_TRUE(at::allclose(y, y_ref, 1e-4, 1e-5))
        << "batch " << batch << ", " << in << "->" << out;
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_TRUE(at::allclose(g[k], g_ref[k], 1e-4, 1e-4))
          << "gradient " << k << ", batch " << batch;
    }
  }
}

// The floating-point count of the training step's convolutions: the layer list must be the
// networks' real convolutions (their parameter count), and the paper-setting total is checked
// against a hand count.
TEST(ModelNetworks, ConvolutionFlopCountMatchesTheNetworks) {
  for (const auto& [in, h, head, size] :
       std::vector<std::array<int64_t, 4>>{{3, 8, 2, 16}, {8, 8, 3, 16}, {3, 32, 1, 64}}) {
    int64_t params = 0;
    for (const ConvLayerShape& l : UNetConvLayers(in, h, head, size)) {
      params += l.in_channels * l.out_channels * l.kernel * l.kernel + l.out_channels;
    }
    // The trunk with its head: every parameter except GroupNorm's 2 per channel.
    UNetTrunk trunk(in, h);
    torch::nn::Conv2d conv_head(torch::nn::Conv2dOptions(h, head, 3).padding(1));
    int64_t conv_params = 0;
    for (const auto& p : trunk->named_parameters()) {
      if (p.key().find("conv") != std::string::npos) conv_params += p.value().numel();
    }
    for (const auto& p : conv_head->parameters()) conv_params += p.numel();
    EXPECT_EQ(params, conv_params) << "in " << in << " h " << h;
  }
  // 64×64, h = 32, one keypoint. Estimator MACs per frame: 3·32·9·64² + 32·64·9·32² +
  // 64·128·9·16² + 192·64·9·32² + 96·32·9·64² + 32·1·9·64² = 268,959,744.
  EXPECT_DOUBLE_EQ(ForwardFlops(UNetConvLayers(3, 32, 1, 64)), 2.0 * 268959744.0);
  // Renderer: 32·32·9·64² + (the same four blocks) + 32·3·9·64² = 305,528,832 MACs.
  EXPECT_DOUBLE_EQ(ForwardFlops(UNetConvLayers(32, 32, 3, 64)), 2.0 * 305528832.0);
}

TEST(ModelNetworks, KeypointEstimatorShapesAndRanges) {
  at::manual_seed(11);
  KeypointEstimator estimator(kK, kH);
  at::Tensor images = at::rand({3, 3, kSize, kSize});
  at::Tensor logits = estimator->forward(images);
  EXPECT_EQ(logits.sizes(), (at::IntArrayRef{3, kK, kSize, kSize}));
  EXPECT_TRUE(at::isfinite(logits).all().item<bool>());
  EXPECT_TRUE(at::equal(estimator(images), logits));  // the module holder's call operator
  const SpatialSoftmaxResult est = estimator->Estimate(images, at::tensor({1, 4, 6}, at::kLong));
  EXPECT_EQ(est.keypoints.sizes(), (at::IntArrayRef{3, kK, 2}));
  EXPECT_EQ(est.probabilities.sizes(), (at::IntArrayRef{3, kK, kSize, kSize}));
  EXPECT_LE(est.keypoints.abs().max().item<float>(), 1.0f);
  EXPECT_TRUE(at::allclose(est.probabilities.sum({-2, -1}), at::ones({3, kK})));
  // Gradients reach the trunk through the augmented path.
  est.keypoints.sum().backward();
  for (const auto& p : estimator->parameters()) {
    ASSERT_TRUE(p.grad().defined());
  }
  EXPECT_THROW(estimator->forward(at::rand({1, 1, kSize, kSize})), InputError);
  EXPECT_THROW(estimator->forward(at::zeros({1, 3, kSize, kSize}, at::kByte)), InputError);
  EXPECT_THROW(estimator->forward(at::rand({1, 3, 8, 16}), at::tensor({1}, at::kLong)),
               InputError);  // rotations need square images
  EXPECT_THROW(KeypointEstimator(0, kH), InputError);
}

TEST(ModelNetworks, RendererShapesRangesAndSeed) {
  at::manual_seed(12);
  Renderer renderer(kK, kH, kSize, kSize);
  EXPECT_EQ(renderer->seed().sizes(), (at::IntArrayRef{kH - kK, kSize, kSize}));
  at::Tensor keypoints = at::rand({4, kK, 2}) * 2 - 1;
  at::Tensor images = renderer->forward(keypoints);
  EXPECT_EQ(images.sizes(), (at::IntArrayRef{4, 3, kSize, kSize}));
  EXPECT_GT(images.min().item<float>(), 0.0f);
  EXPECT_LT(images.max().item<float>(), 1.0f);
  // The image depends on the keypoints, and gradients reach them and the seed.
  keypoints.requires_grad_(true);
  renderer->forward(keypoints).square().sum().backward();
  EXPECT_GT(keypoints.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_GT(renderer->seed().grad().abs().sum().item<float>(), 0.0f);
  EXPECT_THROW(renderer->forward(at::zeros({1, kK + 1, 2})), InputError);
  EXPECT_THROW(Renderer(kK, kH, 18, 16), InputError);
  EXPECT_THROW(Renderer(9, kH, 16, 16), InputError);  // h − K < 0
}

TEST(ModelNetworks, RendererSeedIsStandardNormal) {
  at::manual_seed(13);
  Renderer renderer(kK, 32, 32, 32);  // 30·32·32 seed values for the statistics
  const at::Tensor& seed = renderer->seed();
  EXPECT_NEAR(seed.mean().item<float>(), 0.0, 0.02);
  EXPECT_NEAR(seed.std().item<float>(), 1.0, 0.02);
}

TEST(ModelNetworks, PotentialGradientAgreesWithFiniteDifferences) {
  at::manual_seed(14);
  PotentialEnergy potential(kK, 16);
  {  // Bigger weights than the 0.01 init so that V is clearly nonlinear.
    at::NoGradGuard no_grad;
    for (auto& p : potential->parameters()) p.normal_(0.0, 0.7);
  }
  potential->to(at::kDouble);
  at::Tensor x = at::rand({3, 2 * kK}, at::kDouble) * 2 - 1;
  at::Tensor v = potential->forward(x);
  EXPECT_EQ(v.sizes(), (at::IntArrayRef{3}));
  at::Tensor grad = PotentialGradient(potential, x);
  EXPECT_EQ(grad.sizes(), x.sizes());
  const double step = 1e-6;
  at::NoGradGuard no_grad;
  for (int64_t i = 0; i < 2 * kK; ++i) {
    at::Tensor e = at::zeros_like(x);
    e.select(1, i).fill_(step);
    at::Tensor fd = (potential->forward(x + e) - potential->forward(x - e)) / (2 * step);
    EXPECT_TRUE(at::allclose(grad.select(1, i), fd, 1e-6, 1e-8)) << "coordinate " << i;
  }
  // Under NoGradGuard it still works and carries no history.
  at::Tensor quiet = PotentialGradient(potential, x);
  EXPECT_FALSE(quiet.requires_grad());
  EXPECT_TRUE(at::allclose(quiet, grad));
}

TEST(ModelNetworks, PotentialGradientTrainsWeightsAndFlowsIntoState) {
  at::manual_seed(15);
  PotentialEnergy potential(kK, 8);
  at::Tensor x = (at::rand({2, 2 * kK}) * 2 - 1).requires_grad_(true);
  at::Tensor grad = PotentialGradient(potential, x);
  ASSERT_TRUE(grad.requires_grad());
  grad.square().sum().backward();  // a loss on ∇V, as in the dynamics loss
  for (const auto& item : potential->named_parameters()) {
    // V's output bias is a constant offset of the energy: ∇V does not depend on it.
    if (item.key() == "mlp.linear3.bias") {
      EXPECT_FALSE(item.value().grad().defined());
    } else {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
    }
  }
  EXPECT_GT(potential->parameters()[0].grad().abs().sum().item<float>(), 0.0f);
  ASSERT_TRUE(x.grad().defined());  // second derivative ∇²V reaches the state
  EXPECT_GT(x.grad().abs().sum().item<float>(), 0.0f);
}

TEST(ModelNetworks, PotentialGradientSecondDerivativesEqualAutogradsDoubleBackward) {
  // The chain-rule gradient against autograd's create_graph gradient: the same values, and a
  // loss on it gives the same gradients for every weight and for the state (∇²V · w).
  at::manual_seed(17);
  PotentialEnergy potential(kK, 16);
  {
    at::NoGradGuard no_grad;
    for (auto& p : potential->parameters()) p.normal_(0.0, 0.7);
  }
  potential->to(at::kDouble);
  const at::Tensor x0 = at::rand({5, 2 * kK}, at::kDouble) * 2 - 1;
  const at::Tensor w = at::randn({5, 2 * kK}, at::kDouble);
  auto gradients = [&](bool by_hand) {
    potential->zero_grad();
    at::Tensor x = x0.clone().requires_grad_(true);
    at::Tensor g;
    if (by_hand) {
      g = PotentialGradient(potential, x);
    } else {
      g = torch::autograd::grad({potential->forward(x).sum()}, {x}, {}, true, true)[0];
    }
    (g * w).sum().backward();
    std::vector<at::Tensor> out{g.detach(), x.grad().clone()};
    for (const auto& p : potential->parameters()) {
      out.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    }
    return out;
  };
  const auto mine = gradients(true), reference = gradients(false);
  ASSERT_EQ(mine.size(), reference.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_TRUE(at::allclose(mine[i], reference[i], 1e-10, 1e-12)) << "tensor " << i;
  }
  EXPECT_GT(mine[1].abs().max().item<double>(), 1e-3);  // ∇²V · w is not trivially zero
}

TEST(ModelNetworks, DenseInitStatisticsAndMassInit) {
  at::manual_seed(16);
  const int64_t h = 64;
  PotentialEnergy potential(kK, h);
  InputMatrix input(kK, 3, h);
  for (const auto* module : std::vector<const torch::nn::Module*>{potential.get(), input.get()}) {
    std::vector<at::Tensor> weights;
    for (const auto& item : module->named_parameters()) {
      const at::Tensor& p = item.value();
      if (item.key().find("bias") != std::string::npos) {
        EXPECT_EQ(p.abs().max().item<float>(), 0.0f) << item.key();
      } else {
        weights.push_back(p.flatten());
      }
    }
    ASSERT_EQ(weights.size(), 3u);
    at::Tensor all = at::cat(weights);
    EXPECT_NEAR(all.std().item<float>(), kDenseInitStd, 0.05 * kDenseInitStd);
    EXPECT_NEAR(all.mean().item<float>(), 0.0, 0.1 * kDenseInitStd);
  }
  at::Tensor b = input->forward(at::rand({5, 7, 2 * kK}));
  EXPECT_EQ(b.sizes(), (at::IntArrayRef{5, 7, 2 * kK, 3}));
  EXPECT_THROW(input->forward(at::rand({5, 2 * kK + 1})), InputError);
  EXPECT_THROW(InputMatrix(kK, 0, h), InputError);

  // fan-in: each layer's weights U(±1/√fan_in), so their std is 1/√(3·fan_in); biases 0.
  InputMatrix wide(kK, 3, h, DenseInit::kFanIn);
  const std::vector<int64_t> fan_in = {2 * kK, h, h};
  for (int i = 0; i < 3; ++i) {
    const std::string name = "mlp.linear" + std::to_string(i + 1);
    const at::Tensor w = *wide->named_parameters().find(name + ".weight");
    const double bound = 1.0 / std::sqrt(double(fan_in[i]));
    EXPECT_LE(w.abs().max().item<double>(), bound) << name;
    EXPECT_NEAR(w.std().item<double>(), bound / std::sqrt(3.0), 0.15 * bound / std::sqrt(3.0))
        << name;
    EXPECT_EQ(wide->named_parameters().find(name + ".bias")->abs().max().item<float>(), 0.0f);
  }
  EXPECT_EQ(ParseDenseInit("fan-in"), DenseInit::kFanIn);
  EXPECT_EQ(ParseDenseInit("paper"), DenseInit::kPaper);
  EXPECT_THROW(ParseDenseInit("kaiming"), InputError);

  MassMatrix mass(3);
  EXPECT_TRUE(at::equal(mass->m(), at::ones({3})));
  EXPECT_TRUE(at::equal(mass->Diagonal(), at::ones({6})));
  EXPECT_TRUE(at::equal(mass->InverseDiagonal(), at::ones({6})));
  {
    at::NoGradGuard no_grad;
    mass->m().copy_(at::tensor({2.0f, -0.5f, 3.0f}));
  }
  EXPECT_TRUE(at::allclose(mass->Diagonal(), at::tensor({4.0f, 4.0f, 0.25f, 0.25f, 9.0f, 9.0f})));
  EXPECT_TRUE(at::allclose(mass->InverseDiagonal(),
                           at::tensor({0.25f, 0.25f, 4.0f, 4.0f, 1.0f / 9, 1.0f / 9})));
}

}  // namespace
}  // namespace keycld
