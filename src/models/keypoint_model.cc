#include "keycld/models/keypoint_model.h"

#include "keycld/model/autocast.h"
#include "keycld/model/keypoints.h"
#include "keycld/model/unet.h"
#include "keycld/util/error.h"

#include <algorithm>
#include <string>

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

void CheckKeypointOrder(const std::vector<int64_t>& order, int64_t num_keypoints) {
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  bool ok = int64_t(sorted.size()) == num_keypoints;
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == int64_t(i);
  if (!ok) {
    throw InputError("a keypoint order must be a permutation of 0 … " +
                     std::to_string(num_keypoints - 1) + " (one entry per keypoint)");
  }
}

std::function<torch::Tensor(const torch::Tensor&)> TakeSlices(int64_t dim,
                                                              std::vector<int64_t> index) {
  return [dim, index = std::move(index)](const torch::Tensor& old) {
    torch::Tensor i = torch::tensor(index, torch::kInt64).to(old.device());
    return old.index_select(dim, i);
  };
}

std::vector<int64_t> StateIndexOfOrder(const std::vector<int64_t>& order, int64_t per_entry) {
  std::vector<int64_t> index;
  for (int64_t k : order) {
    for (int64_t c = 0; c < 2; ++c) {
      for (int64_t a = 0; a < per_entry; ++a) index.push_back((2 * k + c) * per_entry + a);
    }
  }
  return index;
}

std::vector<RelabelledParameter> KeypointModelImpl::PerceptionRelabelling(
    const std::vector<int64_t>& order) {
  const int64_t K = spec().num_keypoints;
  CheckKeypointOrder(order, K);
  // The renderer's input is cat(seed [h − K], Gaussian maps [K]) (renderer.cc).
  torch::Tensor& first = renderer_->trunk()->block(0).conv()->weight;  // [h, h, 3, 3]
  const int64_t maps_start = first.size(1) - K;
  std::vector<int64_t> input(size_t(first.size(1)));
  for (int64_t c = 0; c < first.size(1); ++c) input[size_t(c)] = c;
  for (int64_t k = 0; k < K; ++k) input[size_t(maps_start + k)] = maps_start + order[size_t(k)];
  return {{estimator_->head()->weight, TakeSlices(0, order)},
          {estimator_->head()->bias, TakeSlices(0, order)},
          {first, TakeSlices(1, input)}};
}

double TrainingStepFlops(const ModelSpec& spec, int64_t frames) {
  const auto estimator = UNetConvLayers(3, spec.hidden, spec.num_keypoints, spec.image_size);
  const auto renderer = UNetConvLayers(spec.hidden, spec.hidden, 3, spec.image_size);
  const double forward = ForwardFlops(estimator) + ForwardFlops(renderer);
  return double(frames) * (3.0 * forward - estimator.front().ForwardFlops());
}

}  // namespace keycld
