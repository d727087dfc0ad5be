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

 protected:
  /// The estimator's and renderer's share of KeypointRelabelling: the estimator head's output
  /// channels (its heatmap logits) and the renderer's first convolution's input channels of the
  /// Gaussian maps. Checks `order` (InputError).
  std::vector<RelabelledParameter> PerceptionRelabelling(const std::vector<int64_t>& order);

 private:
  KeypointEstimator estimator_{nullptr};
  Renderer renderer_{nullptr};
};

/// InputError unless `order` is a permutation of 0 … num_keypoints − 1.
void CheckKeypointOrder(const std::vector<int64_t>& order, int64_t num_keypoints);

/// A relabelling map (RelabelledParameter::relabel) that takes slice i along `dim` from the old
/// tensor's slice index[i]; index.size() must be the tensor's size along dim.
std::function<torch::Tensor(const torch::Tensor&)> TakeSlices(int64_t dim,
                                                              std::vector<int64_t> index);

/// The state-vector index of a keypoint relabelling: entries 2k, 2k + 1 of the new state x are
/// entries 2·order[k], 2·order[k] + 1 of the old one, repeated `per_entry` times (B's output
/// rows: `per_entry` = A consecutive rows per state entry).
std::vector<int64_t> StateIndexOfOrder(const std::vector<int64_t>& order, int64_t per_entry = 1);

/// Floating-point work of one training step (docs/method.md §6) of a keypoint model on a
/// sequence of `frames` frames, counting the convolutions of the keypoint estimator and the
/// renderer, which are nearly all of it: forward 2·MACs of every convolution per frame; backward
/// the same again for the gradient with respect to the weights and once more for the gradient
/// with respect to the input, except the estimator's first layer (its input is the images). Left
/// out: normalisation, activations, pooling, the spatial softmax and the dynamics (a few MFLOP
/// per step). Paper setting (64×64, h = 32, K = 1, 50 frames): 172.0 GFLOP.
double TrainingStepFlops(const ModelSpec& spec, int64_t frames);

}  // namespace keycld
