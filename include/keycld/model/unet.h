// The convolutional building blocks of the keypoint estimator and the renderer: Block and the
// small U-Net trunk (KeyCLD §3, docs/method.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace keycld {

/// Number of GroupNorm groups in every Block (KeyCLD §3); channel counts must divide by it.
inline constexpr int64_t kBlockGroups = 8;

/// y = conv(x) for a stride-1 2-D convolution module, computed by oneDNN on the CPU for every
/// batch size. LibTorch 1.13 sends a float32 convolution with batch 1 and a small input
/// (C·H·W ≤ 20,480) to its own im2col + BLAS kernel, which with Debian's reference BLAS runs at
/// about 6 GFLOP/s: a single 64×64 frame spent 8 of its 11.7 ms in two such layers
/// (docs/benchmarks.md). Elsewhere (CUDA, bf16 autocast, other dtypes, a LibTorch without
/// oneDNN) this is conv->forward(x). Same values and gradients either way (same operator
/// semantics; tests/model_networks_test.cc compares both).
/// x: [B, C_in, H, W]; returns [B, C_out, H', W'].
torch::Tensor Conv2dForward(torch::nn::Conv2d& conv, const torch::Tensor& x);

/// A network's output layer: Conv2dForward in the layer's own dtype (float32) even under
/// autocast, the features cast to it. Keypoint logits feed a spatial softmax, whose keypoints
/// move by fractions of a pixel; rounded to bf16 (8-bit mantissa) they stalled training
/// (CPU preset, pendulum: reconstruction loss 2.2 against 1.4 in float32 after 1,350 steps).
torch::Tensor OutputConv2dForward(torch::nn::Conv2d& conv, const torch::Tensor& features);

/// Block(c) of KeyCLD §3: 3×3 convolution (same padding) → GroupNorm with 8 groups → ReLU.
/// Maps [B, in_channels, H, W] → [B, out_channels, H, W]. Submodules: "conv", "norm".
/// Throws InputError unless in_channels ≥ 1 and out_channels is a positive multiple of 8.
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t in_channels, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d& conv() { return conv_; }
  torch::nn::GroupNorm& norm() { return norm_; }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::GroupNorm norm_{nullptr};
};
TORCH_MODULE(Block);

/// The U-Net trunk shared by the keypoint estimator and the renderer (KeyCLD §3), widths
/// (h, 2h, 4h, 2h, h):
///   a1 = Block(h)(x)                        at H × W
///   a2 = Block(2h)(maxpool₂ a1)             at H/2 × W/2
///   a3 = Block(4h)(maxpool₂ a2)             at H/4 × W/4
///   a4 = Block(2h)(concat(up₂ a3, a2))      at H/2 × W/2
///   a5 = Block(h)(concat(up₂ a4, a1))       at H × W
/// with up₂ nearest-neighbour ×2 and channels concatenated in the order written.
/// forward: x [B, in_channels, H, W] → a5 [B, h, H, W]. Submodules: "block1" … "block5".
/// Throws InputError (constructor) unless h is a positive multiple of 8, and (forward) for
/// a wrong shape or H, W not divisible by 4.
class UNetTrunkImpl : public torch::nn::Module {
 public:
  UNetTrunkImpl(int64_t in_channels, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);

  int64_t in_channels() const { return in_channels_; }
  int64_t hidden() const { return hidden_; }
  /// Block b + 1 of the five (b in [0, 5)).
  BlockImpl& block(int b);

 private:
  int64_t in_channels_, hidden_;
  Block block1_{nullptr}, block2_{nullptr}, block3_{nullptr}, block4_{nullptr}, block5_{nullptr};
};
TORCH_MODULE(UNetTrunk);

/// One convolution of a network, as the floating-point count sees it.
struct ConvLayerShape {
  int64_t in_channels, out_channels, kernel, out_height, out_width;
  /// Multiply-adds counted as 2 FLOPs: 2 · C_in · C_out · k² · H_out · W_out (bias ignored).
  double ForwardFlops() const;
};

/// The convolutions of a U-Net trunk (KeyCLD §3: blocks at H, H/2, H/4, H/2, H) followed by a
/// 3×3 head with head_channels outputs, for one size×size frame; `size` a multiple of 4.
std::vector<ConvLayerShape> UNetConvLayers(int64_t in_channels, int64_t hidden,
                                           int64_t head_channels, int64_t size);

/// Sum of ForwardFlops over layers.
double ForwardFlops(const std::vector<ConvLayerShape>& layers);

}  // namespace keycld
