// The keypoint estimator: images → K heatmap logits → keypoints (KeyCLD §3, §6;
// docs/method.md).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "keycld/model/keypoints.h"
#include "keycld/model/onednn_unet.h"
#include "keycld/model/unet.h"

namespace keycld {

/// Keypoint estimator (KeyCLD §3): UNetTrunk(3, h) → 3×3 convolution (same padding) to K
/// heatmap logits. Submodules: "trunk", "head". Throws InputError (constructor) unless K ≥ 1
/// and h is a positive multiple of 8.
class KeypointEstimatorImpl : public torch::nn::Module {
 public:
  KeypointEstimatorImpl(int64_t num_keypoints, int64_t hidden = 32);

  /// images: floating [B, 3, H, W] in [0, 1], H and W multiples of 4 → logits [B, K, H, W].
  /// With `transform_ids` int64 [B] in [0, 8) (dihedral.h), frame b is transformed by
  /// T_{t_b} before the network and its logits by T_{t_b}⁻¹ after, so the logits are in the
  /// original frame (the equivariant augmentation of KeyCLD §6; needs H == W). An undefined
  /// `transform_ids` means no augmentation. `kernels` chooses how the U-Net is computed while
  /// gradients are recorded (onednn_unet.h). Throws InputError for bad shapes, dtype or ids.
  torch::Tensor forward(const torch::Tensor& images, const torch::Tensor& transform_ids = {},
                        TrunkKernels kernels = TrunkKernels::kLibTorch);

  /// Spatial softmax of forward(images, transform_ids): probabilities [B, K, H, W] and
  /// keypoints [B, K, 2] in normalized image coordinates (KeyCLD §2, §3).
  SpatialSoftmaxResult Estimate(const torch::Tensor& images,
                                const torch::Tensor& transform_ids = {},
                                TrunkKernels kernels = TrunkKernels::kLibTorch);

  int64_t num_keypoints() const { return num_keypoints_; }
  int64_t hidden() const { return hidden_; }
  /// The 3×3 convolution to the K heatmap logits (weight [K, h, 3, 3], bias [K]).
  torch::nn::Conv2d& head() { return head_; }

 private:
  torch::Tensor Logits(const torch::Tensor& images, TrunkKernels kernels);

  int64_t num_keypoints_, hidden_;
  UNetTrunk trunk_{nullptr};
  torch::nn::Conv2d head_{nullptr};
};
TORCH_MODULE(KeypointEstimator);

}  // namespace keycld
