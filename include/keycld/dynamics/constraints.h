// Holonomic constraints Φ(x) = 0 on keypoint coordinates, with their analytic Jacobian
// D = ∂Φ/∂x and curvature term h_c = ẋᵀ ∇²Φ_c ẋ (KeyCLD §4 / docs/method.md §4).
//
// States are batched rows x ∈ [B, 2K] in normalized image coordinates (docs/method.md §2), ordered
// (x₁, y₁, x₂, y₂, …, x_K, y_K). Every method follows the device and dtype of its input and is
// differentiable by autograd (also into x), so training can backpropagate through it.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "keycld/dynamics/constraint_term.h"
#include "keycld/sim/env_name.h"

namespace keycld {

/// A set of C holonomic constraints on K keypoints (KeyCLD §4). C may be 0: the
/// "no constraints" set of the KeyCLD-NC ablation (docs/method.md §9), for which Φ, D and h are
/// empty tensors ([B, 0], [B, 0, 2K], [B, 0]).
///
/// Norms are regularised as ‖p‖_ε = sqrt(‖p‖² + kNormEpsilonSquared) so that Φ, D, h and their
/// autograd gradients stay finite where a point sits on the pivot or two points coincide; D and
/// h are the exact derivatives of this regularised Φ. The difference to the plain norm is
/// ε²/(2‖p‖): 1e-12 at the constraint lengths 0.3–0.5, far under any tolerance used here.
class HolonomicConstraints {
 public:
  /// Added to squared norms inside the square root (normalized image coordinates squared).
  static constexpr double kNormEpsilonSquared = 1e-12;

  /// Throws InputError when num_keypoints < 1 or a term indexes outside the state.
  HolonomicConstraints(int num_keypoints, std::vector<ConstraintTerm> terms);

  /// The constraints of docs/method.md §4 (lengths are fixed constants):
  ///   pendulum (K = 1): ‖p₁‖ − 0.5;
  ///   cartpole (K = 2): y₁; ‖p₁ − p₂‖ − 0.5;
  ///   acrobot  (K = 2): ‖p₁‖ − 0.3; ‖p₁ − p₂‖ − 0.3.
  /// The same terms come from the built-in description files (assets/systems/*.toml).
  /// Throws InputError for EnvName::kCustom (its terms are in the model spec).
  static HolonomicConstraints ForEnvironment(EnvName env);
  /// No constraints (C = 0) on K keypoints: the KeyCLD-NC ablation (docs/method.md §9).
  static HolonomicConstraints None(int num_keypoints);

  int num_keypoints() const { return num_keypoints_; }
  /// Length 2K of a state row.
  int state_dim() const { return 2 * num_keypoints_; }
  int num_constraints() const { return static_cast<int>(terms_.size()); }
  const std::vector<ConstraintTerm>& terms() const { return terms_; }

  /// Constraint values Φ(x): x [B, 2K] → [B, C] (normalized image coordinates).
  /// Throws InputError when x is not a floating-point [B, 2K] tensor.
  torch::Tensor Phi(const torch::Tensor& x) const;
  /// Constraint Jacobian D(x) = ∂Φ/∂x (KeyCLD §4): x [B, 2K] → [B, C, 2K] (dimensionless).
  torch::Tensor Jacobian(const torch::Tensor& x) const;
  /// Curvature term h_c(x, ẋ) = ẋᵀ ∇²Φ_c(x) ẋ (KeyCLD §4/§5; Φ̈ = D ẍ + h):
  /// x, ẋ [B, 2K] → [B, C] (normalized units / s² when ẋ is in normalized units / s).
  torch::Tensor Curvature(const torch::Tensor& x, const torch::Tensor& xdot) const;

  /// Human-readable list of the constraints, e.g. "y1 - 0; |p1 - p2| - 0.5" ("none" if C = 0).
  std::string Describe() const;

  /// Throws InputError unless `t` is a floating-point [B, 2K] tensor; `what` names it.
  void CheckState(const torch::Tensor& t, const char* what) const;

 private:
  int num_keypoints_;
  std::vector<ConstraintTerm> terms_;
};

}  // namespace keycld
