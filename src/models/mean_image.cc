#include "keycld/models/mean_image.h"

#include <string>

#include "keycld/util/error.h"

namespace keycld {

torch::Tensor MeanImageLogits(const ModelSpec& spec, const torch::Tensor& mean_image) {
  const int64_t S = spec.image_size;
  if (mean_image.dim() != 3 || mean_image.size(0) != 3 || mean_image.size(1) != S ||
      mean_image.size(2) != S) {
    throw InputError("model '" + spec.model + "': the mean image must be [3, " + std::to_string(S) +
                     ", " + std::to_string(S) + "], got " + c10::str(mean_image.sizes()));
  }
  return torch::logit(mean_image.to(torch::kFloat32).clamp(1e-3, 1 - 1e-3));
}

void StartAtMeanImage(const ModelSpec& spec, const torch::Tensor& mean_image,
                      torch::Tensor& input_mean, torch::Tensor& background,
                      torch::nn::Sequential& decoder) {
  const torch::Tensor logits = MeanImageLogits(spec, mean_image);
  torch::NoGradGuard no_grad;
  input_mean.copy_(mean_image);
  if (background.defined()) {
    background.copy_(logits);
  } else {
    decoder->ptr<torch::nn::LinearImpl>(4)->bias.copy_(logits.reshape({-1}));
  }
}

}  // namespace keycld
