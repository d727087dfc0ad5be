// The convolutional building blocks of the keypoint estimator and the renderer: Block and the
// small U-Net trunk (KeyCLD §3, ../shared/KEYCLD.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace keycld {

/// Number of GroupNorm groups in every Block (KeyCLD §3); channel counts must divide by it.
inline constexpr int64_t kBlockGroups = 8;

/// Block(c) of KeyCLD §3: 3×3 convolution (same padding) → GroupNorm with 8 groups → ReLU.
/// Maps [B, in_channels, H, W] → [B, out_channels, H, W]. Submodules: "conv", "norm".
/// Throws InputError unless in_channels ≥ 1 and out_channels is a positive multiple of 8.
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t in_channels, int64_t out_channels);
  torch::Tensor forward(const torch::Tensor& x);

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

 private:
  int64_t in_channels_, hidden_;
  Block block1_{nullptr}, block2_{nullptr}, block3_{nullptr}, block4_{nullptr}, block5_{nullptr};
};
TORCH_MODULE(UNetTrunk);

}  // namespace keycld
