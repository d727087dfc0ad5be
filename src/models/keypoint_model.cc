#include "keycld/models/keypoint_model.h"

#include "keycld/model/autocast.h"
#include "keycld/model/keypoints.h"
#include "keycld/model/unet.h"

namespace keycld {

KeypointModelImpl::KeypointModelImpl(const ModelSpec& spec) : ModelImpl(spec) {
  estimator_ = register_module("estimator", KeypointEstimator(spec.num_keypoints, spec.hidden));
  renderer_ = register_module("renderer", Renderer(spec.num_keypoints, spec.hidden,
                                                   spec.image_size, spec.image_size, spec.sigma));
}

Encoding KeypointModelImpl::Encode(const torch::Tensor& images,
                                   const torch::Tensor& transform_ids) {
  if (precision() == Precision::kFloat32) {
    auto r = estimator_->Estimate(images, transform_ids, trunk_kernels());
    return {r.keypoints, r.probabilities};
  }
  torch::Tensor logits;
  {
    AutocastGuard autocast(images.device(), true, at::kBFloat16);
    logits = estimator_->forward(images, transform_ids);
  }
  auto r = SpatialSoftmax(logits.to(torch::kFloat32));
  return {r.keypoints, r.probabilities};
}

torch::Tensor KeypointModelImpl::Render(const torch::Tensor& keypoints) {
  if (precision() == Precision::kFloat32) return renderer_->forward(keypoints, trunk_kernels());
  torch::Tensor images;
  {
    AutocastGuard autocast(keypoints.device(), true, at::kBFloat16);
    images = renderer_->forward(keypoints);
  }
  return images.to(torch::kFloat32);
}

std::vector<torch::Tensor> KeypointModelImpl::PerceptionParameters() {
  auto p = estimator_->parameters();
  auto r = renderer_->parameters();
  p.insert(p.end(), r.begin(), r.end());
  return p;
}

double TrainingStepFlops(const ModelSpec& spec, int64_t frames) {
  const auto estimator = UNetConvLayers(3, spec.hidden, spec.num_keypoints, spec.image_size);
  const auto renderer = UNetConvLayers(spec.hidden, spec.hidden, 3, spec.image_size);
  const double forward = ForwardFlops(estimator) + ForwardFlops(renderer);
  return double(frames) * (3.0 * forward - estimator.front().ForwardFlops());
}

}  // namespace keycld
