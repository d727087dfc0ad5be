// Image geometry for the placement tests: spots and centroids in affine_grid's normalised
// coordinates (x right, y down, corners at ±1, align_corners false: pixel j has centre
// (2j + 1)/W − 1).
#pragma once

#include <torch/torch.h>

#include <utility>

namespace keycld::testing {

/// Centroid (x, y) of a [H, W] intensity image.
inline std::pair<double, double> Centroid(const torch::Tensor& image) {
  const int64_t H = image.size(0), W = image.size(1);
  torch::Tensor xs = (2 * torch::arange(W, torch::kFloat64) + 1) / double(W) - 1;
  torch::Tensor ys = (2 * torch::arange(H, torch::kFloat64) + 1) / double(H) - 1;
  torch::Tensor m = image.to(torch::kFloat64);
  const double total = m.sum().item<double>();
  return {(m.sum(0) * xs).sum().item<double>() / total,
          (m.sum(1) * ys).sum().item<double>() / total};
}

/// A Gaussian spot float64 [S, S] of the given width at (x, y).
inline torch::Tensor Spot(int64_t S, double x, double y, double width = 0.06) {
  torch::Tensor xs = (2 * torch::arange(S, torch::kFloat64) + 1) / double(S) - 1;
  torch::Tensor gx = xs.unsqueeze(0).expand({S, S}), gy = xs.unsqueeze(1).expand({S, S});
  return torch::exp(-((gx - x).square() + (gy - y).square()) / (2 * width * width));
}

}  // namespace keycld::testing
