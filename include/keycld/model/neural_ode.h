// The black-box dynamics of the NODE2 baseline (KeyCLD §9 / docs/method.md §9): a second-order
// neural ODE ẍ = g(x, ẋ, u) on the keypoint state x = (x₁, y₁, …, x_K, y_K) in normalized image
// coordinates (docs/method.md §2), with no mass matrix, energy or constraints.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

#include "keycld/model/mechanics.h"

namespace keycld {

/// g(x, ẋ, u): CeluMlp [x, ẋ, u] (4K + A) → 2h → 2h → 2h → 2K, CELU after each of the three
/// hidden layers, dense weights initialised as `init` says (DenseInit) and biases 0 like V and B
/// (docs/method.md §3, §9). Submodule "mlp". The parameters follow the dtype they are cast to
/// (float64 for Dormand–Prince evaluation); inputs are used in their own dtype, so cast both
/// together.
class SecondOrderOdeImpl : public torch::nn::Module {
 public:
  /// Throws InputError for K < 1, A < 1 or h < 1.
  SecondOrderOdeImpl(int64_t num_keypoints, int64_t action_dim, int64_t hidden = 32,
                     DenseInit init = DenseInit::kPaper);

  /// ẍ [B, 2K] (normalized image coordinates / s²) from x, ẋ [B, 2K] and the action u: [B, A],
  /// [A] (shared by the batch), or an undefined / empty tensor (no action: u = 0). u is cast to
  /// the dtype and device of x. Throws InputError on shape mismatches.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& xdot, const torch::Tensor& u);

  int64_t num_keypoints() const { return num_keypoints_; }
  int64_t action_dim() const { return action_dim_; }

 private:
  int64_t num_keypoints_, action_dim_;
  CeluMlp mlp_{nullptr};
};
TORCH_MODULE(SecondOrderOde);

}  // namespace keycld
