// The one interface of the dynamics layer: a batched second-order model ẍ = g(x, ẋ, u) in
// keypoint coordinates (KeyCLD §5). Implementations:
//   - LagrangianDynamics (lagrangian.h): the constrained Euler–Lagrange model of KeyCLD, and with
//     HolonomicConstraints::None the unconstrained ablation KeyCLD-NC (docs/method.md §9);
//   - FunctionDynamics (below): any callable; Model (train/keycld_model.h) wraps the
//     black-box second-order neural ODE of the NODE2 baseline (docs/method.md §9) in it, whose MLP
//     (SecondOrderOde) lives in the model layer.
#pragma once

#include <torch/types.h>

#include <functional>
#include <utility>

#include "keycld/dynamics/integrators.h"

namespace keycld {

class Dynamics {
 public:
  virtual ~Dynamics() = default;

  /// Acceleration ẍ [B, 2K] (normalized image coordinates / s²) of the states x, ẋ [B, 2K]
  /// under the action u: [B, A], [A] (shared by the batch), or an undefined / empty tensor for
  /// no action (docs/method.md §5: the action is constant over a sequence).
  virtual torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                                     const torch::Tensor& u) = 0;

  /// Makes an estimated initial velocity consistent with the model (docs/method.md §5): the
  /// constrained model projects ẋ [B, 2K] onto the tangent space of its constraints; the default
  /// returns ẋ unchanged.
  virtual torch::Tensor ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot) {
    return xdot;
  }

  /// The model's holonomic constraint values Φ(x) [B, C] (normalized image units; docs/method.md
  /// §4) at the states x [B, 2K]; C = 0 (an empty [B, 0] tensor) for a model without
  /// constraints, the default.
  virtual torch::Tensor ConstraintValues(const torch::Tensor& x) {
    return torch::zeros({x.size(0), 0}, x.options());
  }

  /// The acceleration function for the integrators (integrators.h) with the action u held
  /// constant. The returned function references *this, which must outlive it.
  AccelerationFn WithAction(torch::Tensor u) {
    return [this, u = std::move(u)](const torch::Tensor& x, const torch::Tensor& xdot) {
      return Acceleration(x, xdot, u);
    };
  }
};

/// Dynamics given by a callable ẍ = g(x, ẋ, u) (shapes as in Dynamics::Acceleration); the hook
/// for a black-box neural ODE (NODE2, docs/method.md §9) or a hand-written model in tests.
class FunctionDynamics : public Dynamics {
 public:
  using Function = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& xdot,
                                               const torch::Tensor& u)>;
  explicit FunctionDynamics(Function g) : g_(std::move(g)) {}

  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u) override {
    return g_(x, xdot, u);
  }

 private:
  Function g_;
};

}  // namespace keycld
