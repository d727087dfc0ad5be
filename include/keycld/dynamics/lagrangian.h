// Constrained Euler–Lagrange dynamics in keypoint coordinates (KeyCLD §5 / docs/method.md §5):
//   f = −∇V(x) + B(x) u,
//   λ = (D M⁻¹ Dᵀ)⁻¹ (D M⁻¹ f + h),
//   ẍ = M⁻¹ (f − Dᵀ λ),
// with the constant diagonal mass matrix M = diag(m₁², m₁², m₂², m₂², …) (docs/method.md §3), the
// constraint Jacobian D and curvature term h of HolonomicConstraints (constraints.h). This keeps
// Φ̈ = D ẍ + h = 0. Without constraints (KeyCLD-NC) ẍ = M⁻¹ f.
//
// Everything is batched over B states, follows the device and dtype of x, and is differentiable by
// autograd into x, ẋ, the force and the mass scalars.
//
// Solving with D M⁻¹ Dᵀ. The matrix is singular where a constraint's gradient vanishes (a point
// on the pivot, two linked points on top of each other — where a freshly initialised keypoint
// estimator may put its points). By default we solve the Tikhonov-regularised system
//   (D M⁻¹ Dᵀ + ε s I) λ = b,   s = mean of diag(M⁻¹) (detached),
// by batched LU, with ε = max(1e-10, 10 · machine epsilon of the dtype) (1e-10 in float64,
// 1.2e-6 in float32). It is smooth everywhere and λ ≤ |b| / (ε s) stays finite, as do autograd
// gradients. Measured here (cartpole, 4096 random states x ~ N(0, 0.6²), CPU, 1 thread):
//   residual max |D ẍ + h| / (1 + |h| + |f|/m²): Tikhonov 1.5e-9 (f64), 2.4e-5 (f32);
//     pseudo-inverse 1.2e-14 (f64), 4e-6 (f32) — the Tikhonov error is far below the 1.4e-8
//     Dormand–Prince tolerance and below Euler's own constraint drift in float32 training;
//   time per call, B = 48 / 256, forward+backward: Tikhonov 410 / 536 µs,
//     pseudo-inverse 531 / 841 µs (forward alone 104 / 161 vs 151 / 388 µs) — SVD-based pinv is
//     1.3–2.4× slower on CPU (GPU not measured);
//   two points δ apart on the cartpole link: both give the same ẍ and ∂ẍ/∂x down to δ = 1e-8
//     (both grow like 1/δ and 1/δ² — that is the physics of a link of length δ, not the solver);
//     at exact coincidence Tikhonov gives ∂ẍ/∂x ≈ 5e21 (f64) / 4e17 (f32), finite, and pinv
//     5e11, but pinv jumps there (f32: ẍ 2.3e7 at δ = 1e-8, 40 at δ = 1e-10) where a singular
//     value crosses its cut-off, while Tikhonov stays continuous.
// MultiplierSolver::kPseudoInverse selects λ = pinv(D M⁻¹ Dᵀ, rcond = ε) b instead.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>

#include "keycld/dynamics/constraints.h"
#include "keycld/dynamics/dynamics.h"

namespace keycld {

/// Diagonal of the mass matrix M = diag(m₁², m₁², m₂², m₂², …) (docs/method.md §3) from the
/// per-keypoint mass scalars m: [K] → [2K] (or [B, K] → [B, 2K]). Masses are squared so that
/// they stay positive; a zero scalar gives an infinite inverse mass.
torch::Tensor MassMatrixDiagonal(const torch::Tensor& mass_scalars);

/// How (D M⁻¹ Dᵀ) λ = b and the velocity projection are solved.
enum class MultiplierSolver {
  kTikhonov,       ///< (A + ε s I) λ = b by LU solve (default; smooth, always finite)
  kPseudoInverse,  ///< λ = pinv(A, rcond = ε) b, the Moore–Penrose pseudo-inverse
};

struct ConstraintSolveOptions {
  MultiplierSolver solver = MultiplierSolver::kTikhonov;
  /// Relative regularisation ε (Tikhonov weight, or pinv's rcond); negative selects
  /// DefaultRegularization(dtype of x).
  double regularization = -1.0;
};

/// max(1e-10, 10 · machine epsilon of `dtype`): 1e-10 for float64, about 1.2e-6 for float32.
double DefaultRegularization(torch::ScalarType dtype);

/// Lagrange multipliers λ = (D M⁻¹ Dᵀ)⁻¹ (D M⁻¹ f + h) (KeyCLD §5): x, ẋ, f [B, 2K],
/// mass scalars m [K] (or [B, K]) → λ [B, C] (force units). C = 0 gives [B, 0].
/// Throws InputError on shape mismatches.
torch::Tensor LagrangeMultipliers(const HolonomicConstraints& constraints, const torch::Tensor& x,
                                  const torch::Tensor& xdot, const torch::Tensor& mass_scalars,
                                  const torch::Tensor& force,
                                  const ConstraintSolveOptions& options = {});

/// Constrained acceleration ẍ = M⁻¹ (f − Dᵀ λ) (KeyCLD §5), with λ as in LagrangeMultipliers:
/// x, ẋ, f [B, 2K], mass scalars m [K] (or [B, K]) → ẍ [B, 2K] (normalized image coordinates / s²
/// for f in mass · normalized units / s²). With no constraints it is ẍ = M⁻¹ f (KeyCLD-NC).
/// Satisfies D ẍ + h = 0 up to the relative regularisation ε (see the file comment).
torch::Tensor ConstrainedAcceleration(const HolonomicConstraints& constraints,
                                      const torch::Tensor& x, const torch::Tensor& xdot,
                                      const torch::Tensor& mass_scalars, const torch::Tensor& force,
                                      const ConstraintSolveOptions& options = {});

/// Projects velocities onto the tangent space of the constraints (docs/method.md §5, initial
/// velocity from central differences): ẋ ← ẋ − D⁺ D ẋ with D⁺ = Dᵀ (D Dᵀ)⁻¹ (Euclidean metric),
/// solved as configured in `options`. x, ẋ [B, 2K] → [B, 2K]; D ẋ ≈ 0 afterwards.
torch::Tensor ProjectVelocity(const HolonomicConstraints& constraints, const torch::Tensor& x,
                              const torch::Tensor& xdot,
                              const ConstraintSolveOptions& options = {});

/// The learned (or hand-set) parts of the Lagrangian: potential energy V, input matrix B and the
/// mass scalars m (docs/method.md §3). The model layer implements it with its torch::nn modules.
class EnergyModel {
 public:
  virtual ~EnergyModel() = default;
  /// Potential energy V(x): x [B, 2K] → [B] (or [B, 1]).
  virtual torch::Tensor Potential(const torch::Tensor& x) = 0;
  /// ∇V(x): x [B, 2K] → [B, 2K]. The default differentiates Potential by autograd, with
  /// create_graph when grad mode is on (so training reaches V's parameters and x) and a
  /// detached result otherwise; it works inside torch::NoGradGuard too.
  virtual torch::Tensor PotentialGradient(const torch::Tensor& x);
  /// Input matrix B(x): x [B, 2K] → [B, 2K, A].
  virtual torch::Tensor InputMatrix(const torch::Tensor& x) = 0;
  /// Per-keypoint mass scalars m [K] (M = diag(m₁², m₁², …)).
  virtual torch::Tensor MassScalars() = 0;
};

/// An EnergyModel made of callables (hand-set models in tests and tools, or lambdas capturing
/// the model layer's modules). Initialise with designated initialisers, e.g.
/// `FunctionalEnergyModel({.potential = V, .mass_scalars = m})`.
class FunctionalEnergyModel : public EnergyModel {
 public:
  struct Functions {
    std::function<torch::Tensor(const torch::Tensor&)> potential = {};  ///< required
    /// Optional analytic ∇V; empty = autograd of `potential`.
    std::function<torch::Tensor(const torch::Tensor&)> potential_gradient = {};
    /// Optional B(x); empty = unactuated (InputMatrix throws InputError).
    std::function<torch::Tensor(const torch::Tensor&)> input_matrix = {};
    std::function<torch::Tensor()> mass_scalars = {};  ///< required
  };
  /// Throws InputError when `potential` or `mass_scalars` is empty.
  explicit FunctionalEnergyModel(Functions functions);

  torch::Tensor Potential(const torch::Tensor& x) override;
  torch::Tensor PotentialGradient(const torch::Tensor& x) override;
  torch::Tensor InputMatrix(const torch::Tensor& x) override;
  torch::Tensor MassScalars() override;

 private:
  Functions f_;
};

/// Generalised force f = −∇V(x) + B(x) u (KeyCLD §5): x [B, 2K], u [B, A], [A] or an undefined /
/// empty tensor (no action) → f [B, 2K]. Throws InputError on shape mismatches.
torch::Tensor GeneralizedForce(EnergyModel& energy, const torch::Tensor& x, const torch::Tensor& u);

/// The KeyCLD dynamics model (KeyCLD §5): constrained Euler–Lagrange equations with the given
/// holonomic constraints and energy model. With HolonomicConstraints::None(K) it is the
/// unconstrained ablation KeyCLD-NC (ẍ = M⁻¹ f, velocities not projected).
class LagrangianDynamics : public Dynamics {
 public:
  /// Throws InputError when `energy` is null.
  LagrangianDynamics(HolonomicConstraints constraints, std::shared_ptr<EnergyModel> energy,
                     ConstraintSolveOptions options = {});

  /// ẍ [B, 2K] = ConstrainedAcceleration(constraints, x, ẋ, m, −∇V + B u); shapes as in
  /// Dynamics::Acceleration.
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u) override;
  /// ẋ − D⁺ D ẋ (docs/method.md §5); identity without constraints.
  torch::Tensor ProjectVelocity(const torch::Tensor& x, const torch::Tensor& xdot) override;
  /// Φ(x) of its constraints ([B, 0] without any).
  torch::Tensor ConstraintValues(const torch::Tensor& x) override;

  const HolonomicConstraints& constraints() const { return constraints_; }
  EnergyModel& energy() { return *energy_; }
  const ConstraintSolveOptions& options() const { return options_; }

 private:
  HolonomicConstraints constraints_;
  std::shared_ptr<EnergyModel> energy_;
  ConstraintSolveOptions options_;
};

}  // namespace keycld
