#include "keycld/control/true_pendulum.h"

#include <cmath>
#include <string>

#include "keycld/util/error.h"

namespace keycld {

namespace {

torch::Tensor CheckStates(const torch::Tensor& x) {
  if (x.dim() != 2 || x.size(1) != 2) {
    throw InputError("the true pendulum's states are [B, 2], got " + std::to_string(x.dim()) +
                     "-d tensor");
  }
  return x.to(torch::kCPU, torch::kFloat64);
}

}  // namespace

TruePendulumModel::TruePendulumModel(const Environment& env, int image_size)
    : env_(env), image_size_(image_size) {
  if (env.name() != EnvName::kPendulum) {
    throw InputError("TruePendulumModel needs the pendulum, got " + EnvNameString(env.name()));
  }
  if (image_size < 2) throw InputError("image size must be ≥ 2");
  const mjModel* m = env.model();
  if (m->nq != 1 || m->nv != 1 || m->nu != 1 || m->jnt_type[0] != mjJNT_HINGE) {
    throw InputError("the pendulum model must have one hinge and one actuator");
  }
  if (m->dof_damping[0] != 0 || m->jnt_stiffness[0] != 0 || m->dof_frictionloss[0] != 0) {
    throw InputError("the true pendulum assumes a hinge without damping, stiffness or friction");
  }
  // A scratch copy at θ = 0 (up) leaves `env` untouched.
  Environment scratch(env);
  const double zero = 0.0;
  scratch.Reset({&zero, 1}, {&zero, 1});
  const double* anchor = scratch.data()->xanchor;
  const std::array<double, 3> pivot = {anchor[0], anchor[1], anchor[2]};
  const auto tip = scratch.KeypointWorldPositions().at(0);
  const double l = std::hypot(tip[0] - pivot[0], tip[1] - pivot[1], tip[2] - pivot[2]);
  if (!(l > 0)) throw InputError("the pendulum's tip sits on its pivot");

  // The projection of the plane of motion: centre at the pivot, scale s, face-on.
  const auto c = scratch.ProjectToImage(pivot, image_size);
  const auto px = scratch.ProjectToImage({pivot[0] + l, pivot[1], pivot[2]}, image_size);
  const auto pz = scratch.ProjectToImage({pivot[0], pivot[1], pivot[2] + l}, image_size);
  const auto pd = scratch.ProjectToImage({pivot[0] - 0.6 * l, pivot[1], pivot[2] - 0.8 * l},
                                         image_size);
  scale_ = (px[0] - c[0]) / l;
  const double tol = 1e-9 * std::max(1.0, std::abs(scale_));
  if (std::abs(c[0]) > tol || std::abs(c[1]) > tol || std::abs(px[1] - c[1]) > tol ||
      std::abs(pz[0] - c[0]) > tol || std::abs((pz[1] - c[1]) / l - scale_) > tol ||
      std::abs(pd[0] + 0.6 * l * scale_) > tol || std::abs(pd[1] + 0.8 * l * scale_) > tol ||
      !(scale_ > 0)) {
    throw InputError("the pendulum's camera does not see the plane of motion face-on with the "
                     "pivot at the image centre");
  }
  radius_ = scale_ * l;

  // MuJoCo's joint-space inertia (including the bob's own rotational inertia and armature).
  mjtNum inertia = 0;
  mj_fullM(scratch.model(), &inertia, scratch.data()->qM);
  inertia_ = inertia;
  // qfrc_bias at θ = π/2 with θ̇ = 0 is the gravity term ∂V/∂θ = −m g r_c sin θ.
  const double quarter = M_PI / 2;
  scratch.Reset({&quarter, 1}, {&zero, 1});
  gravity_moment_ = -scratch.data()->qfrc_bias[0];
  gear_ = m->actuator_gear[0];

  const double mass_scalar = std::sqrt(inertia_) / radius_;
  auto energy = std::make_shared<FunctionalEnergyModel>(FunctionalEnergyModel::Functions{
      .potential = [this](const torch::Tensor& x) { return Potential(x); },
      .potential_gradient = [this](const torch::Tensor& x) { return PotentialGradient(x); },
      .input_matrix = [this](const torch::Tensor& x) { return InputMatrix(x); },
      .mass_scalars =
          [mass_scalar]() { return torch::full({1}, mass_scalar, torch::kFloat64); },
  });
  dynamics_ = std::make_shared<LagrangianDynamics>(
      HolonomicConstraints(1, {ConstraintTerm::FixedDistanceToOrigin(0, radius_)}), energy);
}

torch::Tensor TruePendulumModel::EstimateKeypoints(std::span<const uint8_t> rgb) {
  if (int64_t(rgb.size()) != int64_t(image_size_) * image_size_ * 3) {
    throw InputError("expected a " + std::to_string(image_size_) + "x" +
                     std::to_string(image_size_) + " RGB image, got " +
                     std::to_string(rgb.size()) + " bytes");
  }
  const auto p = env_.KeypointImagePositions(image_size_).at(0);
  return torch::tensor({p[0], p[1]}, torch::kFloat64).reshape({1, 2});
}

torch::Tensor TruePendulumModel::Potential(const torch::Tensor& x) {
  return CheckStates(x).select(1, 1) * (gravity_moment_ / radius_);
}

torch::Tensor TruePendulumModel::PotentialGradient(const torch::Tensor& x) {
  auto g = torch::zeros({CheckStates(x).size(0), 2}, torch::kFloat64);
  g.select(1, 1).fill_(gravity_moment_ / radius_);
  return g;
}

torch::Tensor TruePendulumModel::InputMatrix(const torch::Tensor& x) {
  const auto p = CheckStates(x);
  const auto r2 = (p * p).sum(1, /*keepdim=*/true).clamp_min(1e-300);
  const auto grad_theta = torch::stack({p.select(1, 1), -p.select(1, 0)}, 1) / r2;  // [B, 2]
  return (gear_ * grad_theta).unsqueeze(-1);                                         // [B, 2, 1]
}

torch::Tensor TruePendulumModel::MassDiagonal() {
  return torch::full({2}, inertia_ / (radius_ * radius_), torch::kFloat64);
}

torch::Tensor TruePendulumModel::ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) {
  return dynamics_->ProjectVelocity(CheckStates(x), CheckStates(v));
}

torch::Tensor TruePendulumModel::Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                                              const torch::Tensor& u) {
  return dynamics_->Acceleration(CheckStates(x), CheckStates(xdot),
                                 u.to(torch::kCPU, torch::kFloat64));
}

}  // namespace keycld
