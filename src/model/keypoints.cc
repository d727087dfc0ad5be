// Spatial softmax, Gaussian maps and the heatmap loss, KeyCLD §2, §3, §6.
#include "keycld/model/keypoints.h"

#include <ATen/ATen.h>

#include <string>

#include "keycld/util/error.h"
#include "keycld/util/text.h"

namespace keycld {
namespace {

void CheckGridSize(int64_t height, int64_t width, const char* who) {
  if (height < 1 || width < 1) {
    throw InputError(std::string(who) + ": image size must be at least 1×1, got " +
                     std::to_string(height) + "×" + std::to_string(width));
  }
}

}  // namespace

CoordinateGrid MakeCoordinateGrid(int64_t height, int64_t width, const at::TensorOptions& options) {
  CheckGridSize(height, width, "MakeCoordinateGrid");
  at::Tensor xs = at::linspace(-1.0, 1.0, width, options);   // columns, left → right
  at::Tensor ys = at::linspace(1.0, -1.0, height, options);  // rows, top → bottom
  return {xs.view({1, width}).expand({height, width}),
          ys.view({height, 1}).expand({height, width})};
}

SpatialSoftmaxResult SpatialSoftmax(const at::Tensor& logits) {
  if (!logits.defined() || logits.dim() < 3 || !at::isFloatingType(logits.scalar_type())) {
    throw InputError("SpatialSoftmax: logits must be floating [..., K, H, W], got " +
                     ShapeText(logits));
  }
  const int64_t height = logits.size(-2), width = logits.size(-1);
  at::Tensor p = at::softmax(logits.flatten(-2), -1).view(logits.sizes());
  const CoordinateGrid grid = MakeCoordinateGrid(height, width, logits.options());
  at::Tensor x = (p * grid.x).sum({-2, -1});
  at::Tensor y = (p * grid.y).sum({-2, -1});
  return {p, at::stack({x, y}, -1)};
}

at::Tensor GaussianMaps(const at::Tensor& keypoints, int64_t height, int64_t width, double sigma) {
  if (!keypoints.defined() || keypoints.dim() < 2 || keypoints.size(-1) != 2 ||
      !at::isFloatingType(keypoints.scalar_type())) {
    throw InputError("GaussianMaps: keypoints must be floating [..., K, 2], got " +
                     ShapeText(keypoints));
  }
  CheckGridSize(height, width, "GaussianMaps");
  if (!(sigma > 0)) {
    throw InputError("GaussianMaps: sigma must be > 0, got " + std::to_string(sigma));
  }
  const CoordinateGrid grid = MakeCoordinateGrid(height, width, keypoints.options());
  at::Tensor x = keypoints.select(-1, 0).unsqueeze(-1).unsqueeze(-1);  // [..., K, 1, 1]
  at::Tensor y = keypoints.select(-1, 1).unsqueeze(-1).unsqueeze(-1);
  at::Tensor d2 = (grid.x - x).square() + (grid.y - y).square();
  return at::exp(d2 * (-0.5 / (sigma * sigma)));
}

at::Tensor HeatmapBce(const at::Tensor& probabilities, const at::Tensor& keypoints, double sigma,
                      double epsilon) {
  if (!probabilities.defined() || !keypoints.defined() || probabilities.dim() < 3 ||
      keypoints.dim() != probabilities.dim() - 1 || keypoints.size(-1) != 2 ||
      probabilities.sizes().slice(0, probabilities.dim() - 2) !=
          keypoints.sizes().slice(0, keypoints.dim() - 1)) {
    throw InputError(
        "HeatmapBce: expected probabilities [..., K, H, W] and keypoints "
        "[..., K, 2] with the same leading dimensions, got " +
        ShapeText(probabilities) + " and " + ShapeText(keypoints));
  }
  if (!(epsilon > 0)) {
    throw InputError("HeatmapBce: epsilon must be > 0, got " + std::to_string(epsilon));
  }
  at::Tensor normalized = probabilities / probabilities.amax({-2, -1}, /*keepdim=*/true);
  at::Tensor target =
      GaussianMaps(keypoints.detach(), probabilities.size(-2), probabilities.size(-1), sigma)
          .to(probabilities.scalar_type());
  at::Tensor log_likelihood =
      target * at::log(normalized + epsilon) + (1.0 - target) * at::log(1.0 - normalized + epsilon);
  return -log_likelihood.mean();
}

}  // namespace keycld
