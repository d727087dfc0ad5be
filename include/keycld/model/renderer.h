// The renderer: keypoints → image (KeyCLD §3; docs/method.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "keycld/model/onednn_unet.h"
#include "keycld/model/unet.h"

namespace keycld {

/// Renderer (KeyCLD §3): the K Gaussian maps of the keypoints (σ = `sigma`, normalized image
/// units, keypoints.h) are concatenated after a learned seed tensor of (h − K) × H × W
/// (parameter "seed", initialised N(0, 1), shared by every frame of the batch) → UNetTrunk(h, h)
/// → 3×3 convolution (same padding) to 3 channels → sigmoid. Submodules: "trunk", "head".
/// Throws InputError (constructor) unless K ≥ 1, h is a multiple of 8 with h ≥ K, H and W are
/// positive multiples of 4, and sigma > 0.
class RendererImpl : public torch::nn::Module {
 public:
  RendererImpl(int64_t num_keypoints, int64_t hidden, int64_t height, int64_t width,
               double sigma = 0.1);

  /// keypoints: floating [B, K, 2] in normalized image coordinates → images [B, 3, H, W] in
  /// (0, 1). `kernels` chooses how the U-Net is computed while gradients are recorded
  /// (onednn_unet.h). Throws InputError for a wrong shape.
  torch::Tensor forward(const torch::Tensor& keypoints,
                        TrunkKernels kernels = TrunkKernels::kLibTorch);

  const torch::Tensor& seed() const { return seed_; }  ///< [h − K, H, W]
  int64_t num_keypoints() const { return num_keypoints_; }
  int64_t hidden() const { return hidden_; }
  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  double sigma() const { return sigma_; }
  /// The U-Net trunk; its first convolution reads cat(seed, Gaussian maps) (h input channels,
  /// the maps last).
  UNetTrunk& trunk() { return trunk_; }

 private:
  int64_t num_keypoints_, hidden_, height_, width_;
  double sigma_;
  torch::Tensor seed_;
  UNetTrunk trunk_{nullptr};
  torch::nn::Conv2d head_{nullptr};
};
TORCH_MODULE(Renderer);

}  // namespace keycld
