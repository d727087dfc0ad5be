// Keypoint coordinates on the image grid: the spatial softmax that turns heatmap logits into
// keypoints, the Gaussian maps that turn keypoints back into heatmaps, and the heatmap loss
// (KeyCLD §2, §3, §6 step 4; docs/method.md).
//
// Normalized image coordinates (KeyCLD §2): x runs from −1 (left column) to +1 (right column)
// and y from +1 (top row, row 0) to −1 (bottom row), as inclusive linear grids over the pixel
// centres, linspace(−1, 1, W) and linspace(1, −1, H). A keypoint is the pair (x, y), so
// keypoints [..., K, 2] flatten row-major into the state ordering (x₁, y₁, …, x_K, y_K).
//
// The functions here only need the tensor type (torch::Tensor is at::Tensor); every result
// lives on the device and has the floating dtype of its main input.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace keycld {

/// The pixel-centre coordinates of an H×W image (KeyCLD §2): `x` [H, W] with x[r][c] =
/// linspace(−1, 1, W)[c] and `y` [H, W] with y[r][c] = linspace(1, −1, H)[r]. Both are
/// broadcast views (expanded, not materialised). Throws InputError unless H, W ≥ 1.
struct CoordinateGrid {
  at::Tensor x;
  at::Tensor y;
};
CoordinateGrid MakeCoordinateGrid(int64_t height, int64_t width, const at::TensorOptions& options);

/// Result of SpatialSoftmax.
struct SpatialSoftmaxResult {
  at::Tensor probabilities;  ///< [..., K, H, W], each map sums to 1 over its H·W pixels.
  at::Tensor keypoints;      ///< [..., K, 2], (x, y) in normalized image coordinates.
};

/// Spatial softmax (KeyCLD §3): p_k = softmax of logits_k over all H·W pixels, keypoint k =
/// (Σ p_k·X, Σ p_k·Y) with the grids of MakeCoordinateGrid.
/// `logits`: floating [..., K, H, W] (typically [B, K, H, W]), any device.
/// Throws InputError for fewer than 3 dimensions or a non-floating dtype.
SpatialSoftmaxResult SpatialSoftmax(const at::Tensor& logits);

/// Gaussian maps (KeyCLD §3): G_k(X, Y) = exp(−((X − x_k)² + (Y − y_k)²) / (2σ²)).
/// `keypoints`: floating [..., K, 2] in normalized image coordinates; `sigma` in normalized
/// image units (0.1 in the paper). Returns [..., K, H, W], 1 exactly at the keypoint.
/// Throws InputError for a bad shape, H or W < 1, or sigma ≤ 0.
at::Tensor GaussianMaps(const at::Tensor& keypoints, int64_t height, int64_t width,
                        double sigma = 0.1);

/// Heatmap loss (KeyCLD §6 step 4): p̃_k = p_k / max(p_k) per map; target y = the Gaussian
/// maps of `keypoints` with no gradient (detached); returns the scalar
/// L_bce = −mean(y·log(p̃ + ε) + (1 − y)·log(1 − p̃ + ε)), mean over every element.
/// `probabilities`: [..., K, H, W] (SpatialSoftmaxResult::probabilities); `keypoints`:
/// [..., K, 2] with the same leading dimensions (usually the estimated keypoints of the same
/// maps). Gradients flow into `probabilities` only. Throws InputError for mismatched shapes.
at::Tensor HeatmapBce(const at::Tensor& probabilities, const at::Tensor& keypoints,
                      double sigma = 0.1, double epsilon = 1e-4);

}  // namespace keycld
