// Keypoint estimator, KeyCLD §3 and §6.
#include "keycld/model/keypoint_estimator.h"

#include <ATen/ATen.h>

#include <string>

#include "keycld/model/dihedral.h"
#include "keycld/util/error.h"

namespace keycld {

KeypointEstimatorImpl::KeypointEstimatorImpl(int64_t num_keypoints, int64_t hidden)
    : num_keypoints_(num_keypoints), hidden_(hidden) {
  if (num_keypoints < 1) {
    throw InputError("KeypointEstimator: number of keypoints K must be ≥ 1, got " +
                     std::to_string(num_keypoints));
  }
  trunk_ = register_module("trunk", UNetTrunk(3, hidden));
  head_ = register_module(
      "head", torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, num_keypoints, 3).padding(1)));
}

torch::Tensor KeypointEstimatorImpl::Logits(const torch::Tensor& images, TrunkKernels kernels) {
  if (UseOneDnnUNet(kernels, images)) {
    return OneDnnUNetForward(*trunk_, *head_, {}, images, kernels == TrunkKernels::kWinograd);
  }
  return OutputConv2dForward(head_, trunk_->forward(images));
}

torch::Tensor KeypointEstimatorImpl::forward(const torch::Tensor& images,
                                             const torch::Tensor& transform_ids,
                                             TrunkKernels kernels) {
  if (!images.defined() || images.dim() != 4 || images.size(1) != 3 ||
      !at::isFloatingType(images.scalar_type())) {
    throw InputError("KeypointEstimator: images must be floating [B, 3, H, W] in [0, 1]");
  }
  return ApplyDihedralAugmented(
      [this, kernels](const torch::Tensor& x) { return Logits(x, kernels); }, images,
      transform_ids);
}

SpatialSoftmaxResult KeypointEstimatorImpl::Estimate(const torch::Tensor& images,
                                                     const torch::Tensor& transform_ids,
                                                     TrunkKernels kernels) {
  return SpatialSoftmax(forward(images, transform_ids, kernels));
}

}  // namespace keycld
