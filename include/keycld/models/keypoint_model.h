// The perception KeyCLD and its ablations share (docs/method.md §3): the keypoint estimator
// (U-Net + spatial softmax, dihedral-equivariant augmentation) and the renderer (learned seed
// tensor + Gaussian maps of the keypoints → U-Net → image). A variant derives from
// KeypointModelImpl and adds its dynamics; the estimator and renderer are built first, so one
// seed gives them the same initial weights in every variant.
#pragma once

#include "keycld/model/keypoint_estimator.h"
#include "keycld/model/renderer.h"
#include "keycld/models/model.h"

namespace keycld {

class KeypointModelImpl : public ModelImpl {
 public:
  /// Registers "estimator" and "renderer" (the checkpoint names).
  explicit KeypointModelImpl(const ModelSpec& spec);

  Encoding Encode(const torch::Tensor& images, const torch::Tensor& transform_ids = {}) override;
  torch::Tensor Render(const torch::Tensor& keypoints) override;
  std::vector<torch::Tensor> PerceptionParameters() override;

 private:
  KeypointEstimator estimator_{nullptr};
  Renderer renderer_{nullptr};
};

/// Floating-point work of one training step (docs/method.md §6) of a keypoint model on a
/// sequence of `frames` frames, counting the convolutions of the keypoint estimator and the
/// renderer, which are nearly all of it: forward 2·MACs of every convolution per frame; backward
/// the same again for the gradient with respect to the weights and once more for the gradient
/// with respect to the input, except the estimator's first layer (its input is the images). Left
/// out: normalisation, activations, pooling, the spatial softmax and the dynamics (a few MFLOP
/// per step). Paper setting (64×64, h = 32, K = 1, 50 frames): 172.0 GFLOP.
double TrainingStepFlops(const ModelSpec& spec, int64_t frames);

}  // namespace keycld
