#include "keycld/dynamics/lagrangian.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <utility>

#include "keycld/util/error.h"
#include "keycld/util/text.h"

namespace keycld {
namespace {

double Regularization(const ConstraintSolveOptions& options, torch::ScalarType dtype) {
  return options.regularization >= 0 ? options.regularization : DefaultRegularization(dtype);
}

// Solves A λ = b for A [B, C, C] symmetric positive semi-definite, b [B, C], as configured.
// `scale` ([] or [B]) sets the size of the Tikhonov term ε · scale · I.
torch::Tensor SolveRegularized(const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& scale, const ConstraintSolveOptions& options) {
  const double eps = Regularization(options, a.scalar_type());
  if (options.solver == MultiplierSolver::kPseudoInverse) {
    return torch::matmul(at::linalg_pinv(a, eps, /*hermitian=*/false), b.unsqueeze(-1))
        .squeeze(-1);
  }
  const torch::Tensor shift = eps * scale.detach();  // [] or [B]
  const int64_t c = a.size(-1);
  // One constraint (the pendulum): λ = b / a, three operations instead of an LU factorisation
  // and its backward (the pendulum's RK4 dynamics loss: 15.0 → 13.2 ms, docs/benchmarks.md; the
  // closed form for two constraints measured no faster than the solve and is not used).
  if (c == 1) return b / (a.select(-1, 0) + shift.unsqueeze(-1));
  const torch::Tensor eye = torch::eye(c, a.options());
  const torch::Tensor tikhonov = shift.unsqueeze(-1).unsqueeze(-1) * eye;
  return at::linalg_solve(a + tikhonov, b.unsqueeze(-1), /*left=*/true).squeeze(-1);
}

void CheckMassScalars(const HolonomicConstraints& c, const torch::Tensor& x,
                      const torch::Tensor& m) {
  const bool ok = m.defined() && m.size(-1) == c.num_keypoints() &&
                  (m.dim() == 1 || (m.dim() == 2 && m.size(0) == x.size(0)));
  if (!ok) {
    throw InputError("constrained dynamics: mass scalars have shape " + ShapeText(m) +
                     " (expected [" + std::to_string(c.num_keypoints()) + "] or [B, " +
                     std::to_string(c.num_keypoints()) + "])");
  }
}

void CheckSameShape(const torch::Tensor& x, const torch::Tensor& t, const char* what) {
  if (!t.defined() || t.sizes() != x.sizes()) {
    throw InputError(std::string("constrained dynamics: ") + what + " has shape " + ShapeText(t) +
                     " (expected " + ShapeText(x) + " like x)");
  }
}

struct MultipliersAndAcceleration {
  torch::Tensor lambda;        // [B, C]
  torch::Tensor acceleration;  // [B, 2K]
};

MultipliersAndAcceleration Solve(const HolonomicConstraints& c, const torch::Tensor& x,
                                 const torch::Tensor& xdot, const torch::Tensor& mass_scalars,
                                 const torch::Tensor& force,
                                 const ConstraintSolveOptions& options) {
  c.CheckState(x, "x");
  c.CheckState(xdot, "xdot");
  CheckSameShape(x, xdot, "xdot");
  CheckSameShape(x, force, "force");
  CheckMassScalars(c, x, mass_scalars);
  const torch::Tensor inv_mass = MassMatrixDiagonal(mass_scalars).reciprocal();  // [2K]/[B, 2K]
  if (c.num_constraints() == 0) {
    return {torch::zeros({x.size(0), 0}, x.options()), inv_mass * force};
  }
  const torch::Tensor d = c.Jacobian(x);                                 // [B, C, 2K]
  const torch::Tensor h = c.Curvature(x, xdot);                          // [B, C]
  const torch::Tensor d_inv_mass = d * inv_mass.unsqueeze(-2);           // D M⁻¹ [B, C, 2K]
  const torch::Tensor a = torch::matmul(d_inv_mass, d.transpose(1, 2));  // [B, C, C]
  const torch::Tensor b = torch::matmul(d_inv_mass, force.unsqueeze(-1)).squeeze(-1) + h;
  const torch::Tensor lambda = SolveRegularized(a, b, inv_mass.mean(-1), options);
  const torch::Tensor constraint_force =
      torch::matmul(d.transpose(1, 2), lambda.unsqueeze(-1)).squeeze(-1);  // Dᵀ λ [B, 2K]
  return {lambda, inv_mass * (force - constraint_force)};
}

}  // namespace

torch::Tensor MassMatrixDiagonal(const torch::Tensor& mass_scalars) {
  return mass_scalars.square().repeat_interleave(2, /*dim=*/-1);
}

double DefaultRegularization(torch::ScalarType dtype) {
  double machine_eps = std::numeric_limits<float>::epsilon();
  switch (dtype) {
    case torch::kFloat64:
      machine_eps = std::numeric_limits<double>::epsilon();
      break;
    case torch::kFloat16:
      machine_eps = 9.765625e-4;  // 2^-10
      break;
    case torch::kBFloat16:
      machine_eps = 7.8125e-3;  // 2^-7
      break;
    default:
      break;
  }
  return std::max(1e-10, 10.0 * machine_eps);
}

torch::Tensor LagrangeMultipliers(const HolonomicConstraints& constraints, const torch::Tensor& x,
                                  const torch::Tensor& xdot, const torch::Tensor& mass_scalars,
                                  const torch::Tensor& force,
                                  const ConstraintSolveOptions& options) {
  return Solve(constraints, x, xdot, mass_scalars, force, options).lambda;
}

torch::Tensor ConstrainedAcceleration(const HolonomicConstraints& constraints,
                                      const torch::Tensor& x, const torch::Tensor& xdot,
                                      const torch::Tensor& mass_scalars, const torch::Tensor& force,
                                      const ConstraintSolveOptions& options) {
  return Solve(constraints, x, xdot, mass_scalars, force, options).acceleration;
}

torch::Tensor ProjectVelocity(const HolonomicConstraints& constraints, const torch::Tensor& x,
                              const torch::Tensor& xdot, const ConstraintSolveOptions& options) {
  constraints.CheckState(x, "x");
  constraints.CheckState(xdot, "xdot");
  CheckSameShape(x, xdot, "xdot");
  if (constraints.num_constraints() == 0) return xdot;
  const torch::Tensor d = constraints.Jacobian(x);                            // [B, C, 2K]
  const torch::Tensor dt = d.transpose(1, 2);                                 // [B, 2K, C]
  const torch::Tensor ddt = torch::matmul(d, dt);                             // [B, C, C]
  const torch::Tensor dv = torch::matmul(d, xdot.unsqueeze(-1)).squeeze(-1);  // [B, C]
  const torch::Tensor mu = SolveRegularized(ddt, dv, torch::ones({}, x.options()), options);
  return xdot - torch::matmul(dt, mu.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor EnergyModel::PotentialGradient(const torch::Tensor& x) {
  const bool create_graph = torch::GradMode::is_enabled();
  torch::AutoGradMode enable(true);
  const torch::Tensor xg = x.requires_grad() ? x : x.detach().requires_grad_(true);
  const torch::Tensor v = Potential(xg);
  if (!v.requires_grad()) return torch::zeros_like(x);
  torch::Tensor g = torch::autograd::grad({v.sum()}, {xg}, /*grad_outputs=*/{},
                                          /*retain_graph=*/create_graph,
                                          /*create_graph=*/create_graph,
                                          /*allow_unused=*/true)[0];
  if (!g.defined()) return torch::zeros_like(x);
  return create_graph ? g : g.detach();
}

FunctionalEnergyModel::FunctionalEnergyModel(Functions functions) : f_(std::move(functions)) {
  if (!f_.potential || !f_.mass_scalars) {
    throw InputError(
        "FunctionalEnergyModel: the 'potential' and 'mass_scalars' functions are required");
  }
}

torch::Tensor FunctionalEnergyModel::Potential(const torch::Tensor& x) { return f_.potential(x); }

torch::Tensor FunctionalEnergyModel::PotentialGradient(const torch::Tensor& x) {
  return f_.potential_gradient ? f_.potential_gradient(x) : EnergyModel::PotentialGradient(x);
}

torch::Tensor FunctionalEnergyModel::InputMatrix(const torch::Tensor& x) {
  if (!f_.input_matrix) {
    throw InputError(
        "FunctionalEnergyModel: no input matrix (unactuated model) but an action "
        "was given");
  }
  return f_.input_matrix(x);
}

torch::Tensor FunctionalEnergyModel::MassScalars() { return f_.mass_scalars(); }

torch::Tensor GeneralizedForce(EnergyModel& energy, const torch::Tensor& x,
                               const torch::Tensor& u) {
  torch::Tensor f = -energy.PotentialGradient(x);
  if (!u.defined() || u.numel() == 0) return f;
  if (u.dim() > 2 || (u.dim() == 2 && u.size(0) != x.size(0))) {
    throw InputError("GeneralizedForce: action u has shape " + ShapeText(u) +
                     " (expected [B, A] or [A] with B = " + std::to_string(x.size(0)) + ")");
  }
  const torch::Tensor input_matrix = energy.InputMatrix(x);  // [B, 2K, A]
  if (input_matrix.dim() != 3 || input_matrix.size(0) != x.size(0) ||
      input_matrix.size(1) != x.size(1) || input_matrix.size(2) != u.size(-1)) {
    throw InputError("GeneralizedForce: input matrix has shape " + ShapeText(input_matrix) +
                     " for action " + ShapeText(u) + " (expected [" + std::to_string(x.size(0)) +
                     ", " + std::to_string(x.size(1)) + ", " + std::to_string(u.size(-1)) + "])");
  }
  return f +
         torch::matmul(input_matrix, u.to(x.device(), x.scalar_type()).unsqueeze(-1)).squeeze(-1);
}

LagrangianDynamics::LagrangianDynamics(HolonomicConstraints constraints,
                                       std::shared_ptr<EnergyModel> energy,
                                       ConstraintSolveOptions options)
    : constraints_(std::move(constraints)), energy_(std::move(energy)), options_(options) {
  if (!energy_) throw InputError("LagrangianDynamics: the energy model is null");
}

torch::Tensor LagrangianDynamics::Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                                               const torch::Tensor& u) {
  constraints_.CheckState(x, "x");
  const torch::Tensor force = GeneralizedForce(*energy_, x, u);
  return ConstrainedAcceleration(constraints_, x, xdot, energy_->MassScalars(), force, options_);
}

torch::Tensor LagrangianDynamics::ProjectVelocity(const torch::Tensor& x,
                                                  const torch::Tensor& xdot) {
  return keycld::ProjectVelocity(constraints_, x, xdot, options_);
}

torch::Tensor LagrangianDynamics::ConstraintValues(const torch::Tensor& x) {
  return constraints_.Phi(x);  // [B, 0] without constraints
}

}  // namespace keycld
