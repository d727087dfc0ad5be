#include "keycld/control/known_model.h"

#include <cmath>
#include <string>

#include "keycld/util/error.h"

namespace keycld {

namespace {

using Vec3 = std::array<double, 3>;

Vec3 Sub(const double* a, const double* b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
double Dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
double Norm(const Vec3& a) { return std::sqrt(Dot(a, a)); }

// Moment of inertia of body `b` about the axis `axis` (unit, world) through `pivot` (world), in
// the current kinematics of `d`: the body's inertia tensor rotated to the world frame, plus the
// parallel-axis term.
double InertiaAbout(const mjModel* m, const mjData* d, int b, const Vec3& axis,
                    const double* pivot) {
  const double* R = d->ximat + 9 * b;  // body inertial frame → world, row-major
  const double* I = m->body_inertia + 3 * b;
  double about = 0;
  for (int k = 0; k < 3; ++k) {
    // Component of the axis along the inertial frame's k-th axis (column k of R).
    const double a = R[0 + k] * axis[0] + R[3 + k] * axis[1] + R[6 + k] * axis[2];
    about += I[k] * a * a;
  }
  const Vec3 r = Sub(d->xipos + 3 * b, pivot);
  const double along = Dot(r, axis);
  return about + m->body_mass[b] * (Dot(r, r) - along * along);
}

torch::Tensor CheckStates(const torch::Tensor& x, const char* what) {
  if (x.dim() != 2 || x.size(1) != 4) {
    throw InputError(std::string("the known model's ") + what + " are [B, 4], got a " +
                     std::to_string(x.dim()) + "-d tensor" +
                     (x.dim() == 2 ? " of width " + std::to_string(x.size(1)) : ""));
  }
  return x.to(torch::kCPU, torch::kFloat64);
}

// Columns of a torque τ = 1 on the absolute angle of the vector r = p_b − p_a: the force
// (r_y, −r_x) / ‖r‖² on b (and its opposite on a). r [B, 2] → [B, 2].
torch::Tensor TorqueForce(const torch::Tensor& r) {
  const auto r2 = (r * r).sum(1, /*keepdim=*/true).clamp_min(1e-300);
  return torch::stack({r.select(1, 1), -r.select(1, 0)}, 1) / r2;
}

}  // namespace

KnownModel::KnownModel(const Environment& env, int image_size)
    : env_(env), name_(env.name()), image_size_(image_size), nu_(env.nu()) {
  if (name_ != EnvName::kCartpole && name_ != EnvName::kAcrobot) {
    throw InputError("KnownModel covers the cartpole and the acrobot, got " + EnvNameString(name_) +
                     " (the pendulum has TruePendulumModel)");
  }
  if (image_size < 2) throw InputError("image size must be ≥ 2");
  const mjModel* m = env.model();
  if (m->nq != 2 || m->nv != 2 || m->njnt != 2) {
    throw InputError("the known " + EnvNameString(name_) + " needs exactly two joints");
  }
  for (int j = 0; j < m->nv; ++j) {
    if (m->dof_damping[j] != 0 || m->jnt_stiffness[j] != 0 || m->dof_frictionloss[j] != 0 ||
        m->dof_armature[j] != 0) {
      throw InputError(
          "the known model assumes joints without damping, stiffness, friction or "
          "armature");
    }
  }
  const bool cartpole = name_ == EnvName::kCartpole;
  if (m->jnt_type[0] != (cartpole ? mjJNT_SLIDE : mjJNT_HINGE) || m->jnt_type[1] != mjJNT_HINGE) {
    throw InputError("unexpected joint types in the " + EnvNameString(name_) + " model");
  }
  // The projection of the plane of motion y = 0: p = s·(x − x₀, z − z₀), face-on.
  const auto c0 = env.ProjectToImage({0, 0, 0}, image_size);
  const auto cx = env.ProjectToImage({1, 0, 0}, image_size);
  const auto cz = env.ProjectToImage({0, 0, 1}, image_size);
  const auto cd = env.ProjectToImage({-0.6, 0, -0.8}, image_size);
  scale_ = cx[0] - c0[0];
  const double tol = 1e-9 * std::max(1.0, std::abs(scale_));
  if (!(scale_ > 0) || std::abs(cx[1] - c0[1]) > tol || std::abs(cz[0] - c0[0]) > tol ||
      std::abs(cz[1] - c0[1] - scale_) > tol || std::abs(cd[0] - c0[0] + 0.6 * scale_) > tol ||
      std::abs(cd[1] - c0[1] + 0.8 * scale_) > tol) {
    throw InputError("the " + EnvNameString(name_) +
                     "'s camera does not see the plane of motion face-on");
  }
  origin_ = {-c0[0] / scale_, -c0[1] / scale_};

  // Geometry and inertia at q = 0 on a scratch copy (leaves `env` untouched).
  Environment scratch(env);
  const std::array<double, 2> zero = {0, 0};
  scratch.Reset(zero, zero);
  const mjData* d = scratch.data();
  hinge_joint_ = 1;
  link_body_ = m->jnt_bodyid[1];
  const double g = -m->opt.gravity[2];
  const double link_mass = m->body_mass[link_body_];
  const Vec3 axis = {d->xaxis[3], d->xaxis[4], d->xaxis[5]};
  if (std::abs(std::abs(axis[1]) - 1) > 1e-9) {
    throw InputError("the known model needs hinges about the camera's viewing axis (y)");
  }
  const double* anchor = d->xanchor + 3;
  com_distance_ = Norm(Sub(d->xipos + 3 * link_body_, anchor));
  if (!(link_mass > 0) || !(com_distance_ > 0)) {
    throw InputError("the " + EnvNameString(name_) +
                     "'s second link has no mass or its centre "
                     "of mass sits on its hinge");
  }
  distance_ = InertiaAbout(m, d, link_body_, axis, anchor) / (link_mass * com_distance_);
  const double tip_mass = link_mass * com_distance_ / distance_;
  const double remainder = link_mass - tip_mass;
  gear_ = {m->actuator_gear[0], nu_ > 1 ? m->actuator_gear[6] : 0.0};
  for (int a = 0; a < nu_; ++a) {
    if (m->actuator_trntype[a] != mjTRN_JOINT || m->actuator_trnid[2 * a] != a) {
      throw InputError("the known model needs actuator i on joint i");
    }
  }
  const auto kp1 = ToImage(WorldKeypoints(d));
  if (cartpole) {
    const int cart = m->jnt_bodyid[0];
    if (std::abs(d->xaxis[0]) != 1 || d->xaxis[1] != 0 || d->xaxis[2] != 0) {
      throw InputError("the cartpole's rail must run along the image's x axis");
    }
    mass_ = {m->body_mass[cart] + remainder, tip_mass};
    weight_ = {g * mass_[0] / scale_, g * mass_[1] / scale_};
    rail_y_ = kp1[1];
  } else {
    const int upper = m->jnt_bodyid[0];
    const double* shoulder = d->xanchor;
    const Vec3 axis0 = {d->xaxis[0], d->xaxis[1], d->xaxis[2]};
    const auto sh = env.ProjectToImage({shoulder[0], shoulder[1], shoulder[2]}, image_size);
    if (std::abs(sh[0]) > tol || std::abs(sh[1]) > tol || std::abs(axis0[1]) != 1 ||
        axis0[1] != axis[1]) {
      throw InputError(
          "the acrobot's shoulder must be at the image centre, both hinges "
          "about the same axis");
    }
    const double l1 = Norm(Sub(anchor, shoulder));
    const double c1 = Norm(Sub(d->xipos + 3 * upper, shoulder));
    const double upper_inertia = InertiaAbout(m, d, upper, axis0, shoulder);
    mass_ = {upper_inertia / (l1 * l1) + remainder, tip_mass};
    weight_ = {g * (m->body_mass[upper] * c1 / l1 + remainder) / scale_, g * tip_mass / scale_};
    upper_length_ = scale_ * l1;
  }
  // Hinge angles grow from z towards x about +y; a hinge about −y turns the other way.
  if (axis[1] < 0) gear_[1] = -gear_[1];
  if (!cartpole && d->xaxis[1] < 0) gear_[0] = -gear_[0];
  if (cartpole && d->xaxis[0] < 0) gear_[0] = -gear_[0];

  const std::array<double, 2> mass = mass_;
  const double s = scale_;
  auto energy = std::make_shared<FunctionalEnergyModel>(FunctionalEnergyModel::Functions{
      .potential = [this](const torch::Tensor& x) { return Potential(x); },
      .potential_gradient = [this](const torch::Tensor& x) { return PotentialGradient(x); },
      .input_matrix = [this](const torch::Tensor& x) { return InputMatrix(x); },
      .mass_scalars =
          [mass, s]() {
            return torch::tensor({std::sqrt(mass[0]) / s, std::sqrt(mass[1]) / s}, torch::kFloat64);
          },
  });
  std::vector<ConstraintTerm> terms;
  if (cartpole) {
    terms.push_back(ConstraintTerm::FixedCoordinate(1, rail_y_));
  } else {
    terms.push_back(ConstraintTerm::FixedDistanceToOrigin(0, upper_length_));
  }
  terms.push_back(ConstraintTerm::FixedDistance(0, 1, scale_ * distance_));
  dynamics_ = std::make_shared<LagrangianDynamics>(HolonomicConstraints(2, terms), energy);
}

std::array<std::array<double, 2>, 2> KnownModel::WorldKeypoints(const mjData* d) const {
  const double* hinge = d->xanchor + 3 * hinge_joint_;
  const double* com = d->xipos + 3 * link_body_;
  const double f = distance_ / com_distance_;
  return {{{hinge[0], hinge[2]},
           {hinge[0] + f * (com[0] - hinge[0]), hinge[2] + f * (com[2] - hinge[2])}}};
}

std::array<double, 4> KnownModel::ToImage(const std::array<std::array<double, 2>, 2>& w) const {
  return {scale_ * (w[0][0] - origin_[0]), scale_ * (w[0][1] - origin_[1]),
          scale_ * (w[1][0] - origin_[0]), scale_ * (w[1][1] - origin_[1])};
}

std::array<double, 4> KnownModel::KeypointsOfState(std::span<const double> qpos) const {
  if (qpos.size() != 2) throw InputError("the known model's joint states have 2 coordinates");
  Environment scratch(env_);
  const std::array<double, 2> zero = {0, 0};
  scratch.Reset(qpos, zero);
  return ToImage(WorldKeypoints(scratch.data()));
}

torch::Tensor KnownModel::EstimateKeypoints(std::span<const uint8_t> rgb) {
  if (int64_t(rgb.size()) != int64_t(image_size_) * image_size_ * 3) {
    throw InputError("expected a " + std::to_string(image_size_) + "x" +
                     std::to_string(image_size_) + " RGB image, got " + std::to_string(rgb.size()) +
                     " bytes");
  }
  const auto p = ToImage(WorldKeypoints(env_.data()));
  return torch::tensor({p[0], p[1], p[2], p[3]}, torch::kFloat64).reshape({1, 4});
}

torch::Tensor KnownModel::Potential(const torch::Tensor& x) {
  const auto p = CheckStates(x, "states");
  return p.select(1, 1) * weight_[0] + p.select(1, 3) * weight_[1];
}

torch::Tensor KnownModel::PotentialGradient(const torch::Tensor& x) {
  auto grad = torch::zeros({CheckStates(x, "states").size(0), 4}, torch::kFloat64);
  grad.select(1, 1).fill_(weight_[0]);
  grad.select(1, 3).fill_(weight_[1]);
  return grad;
}

torch::Tensor KnownModel::InputMatrix(const torch::Tensor& x) {
  const auto p = CheckStates(x, "states");
  const int64_t B = p.size(0);
  const auto p1 = p.slice(1, 0, 2), p2 = p.slice(1, 2, 4);
  const auto link2 = TorqueForce(p2 - p1);  // torque on the second link's absolute angle
  auto cols = torch::zeros({B, 4, nu_}, torch::kFloat64);
  if (name_ == EnvName::kCartpole) {
    cols.select(2, 0).select(1, 0).fill_(gear_[0] / scale_);  // the rail force on the cart
    if (nu_ > 1) {
      cols.select(2, 1).slice(1, 0, 2).copy_(-gear_[1] * link2);
      cols.select(2, 1).slice(1, 2, 4).copy_(gear_[1] * link2);
    }
  } else {
    const auto link1 = TorqueForce(p1);  // torque on the upper arm's absolute angle
    cols.select(2, 0).slice(1, 0, 2).copy_(gear_[0] * link1);
    if (nu_ > 1) {
      // The elbow's angle is relative: +τ on the lower arm, −τ on the upper arm.
      cols.select(2, 1).slice(1, 0, 2).copy_(-gear_[1] * (link2 + link1));
      cols.select(2, 1).slice(1, 2, 4).copy_(gear_[1] * link2);
    }
  }
  return cols;
}

torch::Tensor KnownModel::MassDiagonal() {
  const double s2 = scale_ * scale_;
  return torch::tensor({mass_[0] / s2, mass_[0] / s2, mass_[1] / s2, mass_[1] / s2},
                       torch::kFloat64);
}

torch::Tensor KnownModel::ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) {
  return dynamics_->ProjectVelocity(CheckStates(x, "states"), CheckStates(v, "velocities"));
}

torch::Tensor KnownModel::Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                                       const torch::Tensor& u) {
  return dynamics_->Acceleration(CheckStates(x, "states"), CheckStates(xdot, "velocities"),
                                 u.to(torch::kCPU, torch::kFloat64));
}

}  // namespace keycld
