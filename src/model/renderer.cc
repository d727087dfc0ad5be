// Renderer, KeyCLD §3.
#include "keycld/model/renderer.h"

#include <ATen/ATen.h>

#include <string>

#include "keycld/model/keypoints.h"
#include "keycld/util/error.h"

namespace keycld {

RendererImpl::RendererImpl(int64_t num_keypoints, int64_t hidden, int64_t height, int64_t width,
                           double sigma)
    : num_keypoints_(num_keypoints),
      hidden_(hidden),
      height_(height),
      width_(width),
      sigma_(sigma) {
  if (num_keypoints < 1 || hidden < num_keypoints) {
    throw InputError("Renderer: need 1 ≤ K ≤ h (the seed has h − K channels), got K = " +
                     std::to_string(num_keypoints) + ", h = " + std::to_string(hidden));
  }
  if (height < 4 || width < 4 || height % 4 != 0 || width % 4 != 0) {
    throw InputError("Renderer: image height and width must be positive multiples of 4, got " +
                     std::to_string(height) + "×" + std::to_string(width));
  }
  if (!(sigma > 0)) {
    throw InputError("Renderer: Gaussian map sigma must be > 0, got " + std::to_string(sigma));
  }
  seed_ = register_parameter("seed", at::randn({hidden - num_keypoints, height, width}));
  trunk_ = register_module("trunk", UNetTrunk(hidden, hidden));
  head_ =
      register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(hidden, 3, 3).padding(1)));
}

torch::Tensor RendererImpl::forward(const torch::Tensor& keypoints, TrunkKernels kernels) {
  if (!keypoints.defined() || keypoints.dim() != 3 || keypoints.size(1) != num_keypoints_ ||
      keypoints.size(2) != 2 || !at::isFloatingType(keypoints.scalar_type())) {
    throw InputError("Renderer: keypoints must be floating [B, " + std::to_string(num_keypoints_) +
                     ", 2]");
  }
  const int64_t batch = keypoints.size(0);
  torch::Tensor maps = GaussianMaps(keypoints, height_, width_, sigma_);  // [B, K, H, W]
  if (UseOneDnnUNet(kernels, maps)) {
    return at::sigmoid(
        OneDnnUNetForward(*trunk_, *head_, seed_, maps, kernels == TrunkKernels::kWinograd));
  }
  torch::Tensor seed = seed_.unsqueeze(0).expand({batch, -1, -1, -1});
  torch::Tensor x = at::cat({seed, maps.to(seed_.scalar_type())}, 1);
  return at::sigmoid(OutputConv2dForward(head_, trunk_->forward(x)));
}

}  // namespace keycld
