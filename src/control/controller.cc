#include "keycld/control/controller.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "keycld/util/error.h"

namespace keycld {

namespace {

// Singular values of B below this fraction of the largest are treated as zero by the
// pseudo-inverse (an input matrix that cannot push in some direction gets no huge action there).
constexpr double kPinvRcond = 1e-6;

torch::Tensor AsState(const torch::Tensor& t, int64_t width, const char* what) {
  if (!t.defined() || t.numel() != width || (t.dim() != 1 && t.dim() != 2)) {
    throw InputError(std::string(what) + " must have " + std::to_string(width) +
                     " values (2K), got " + (t.defined() ? std::to_string(t.numel()) : "none"));
  }
  return t.reshape({1, width}).to(torch::kCPU, torch::kFloat64);
}

}  // namespace

GainScale ParseGainScale(const std::string& name) { return ParseName<GainScale>(name); }

std::string GainScaleName(GainScale scale) { return NameOf(scale); }

void ControllerOptions::Validate() const {
  if (!std::isfinite(kp) || !(kp > 0)) {
    throw InputError("the stiffness gain k_p must be finite and > 0, got " + std::to_string(kp));
  }
  if (!std::isfinite(kd) || kd < 0) {
    throw InputError("the damping gain k_d must be finite and ≥ 0, got " + std::to_string(kd));
  }
  if (!std::isfinite(u_max) || u_max < 0) {
    throw InputError("the actuator limit must be finite and ≥ 0 (0 = none), got " +
                     std::to_string(u_max));
  }
}

EnergyShapingController::EnergyShapingController(ControlModel& model, const torch::Tensor& target,
                                                 const ControllerOptions& options)
    : model_(model), options_(options) {
  options_.Validate();
  const int64_t n = 2 * model.num_keypoints();
  target_ = AsState(target, n, "the target keypoints");
  if (!torch::isfinite(target_).all().item<bool>()) {
    throw InputError("the target keypoints are not finite");
  }
  const torch::Tensor mass = model.MassDiagonal().to(torch::kCPU, torch::kFloat64).reshape({n});
  inverse_mass_ = (1.0 / mass).reshape({1, n});
  const torch::Tensor scale =
      options_.gain_scale == GainScale::kMass ? mass : torch::ones({n}, torch::kFloat64);
  kp_ = options_.kp * scale;
  kd_ = options_.kd * scale;
}

ControlAction EnergyShapingController::Act(const torch::Tensor& x_in,
                                           const torch::Tensor& xdot_in) {
  const int64_t n = target_.size(1);
  const int64_t a = model_.action_dim();
  const torch::Tensor x = AsState(x_in, n, "x");
  const torch::Tensor xdot = AsState(xdot_in, n, "xdot");
  // Rows: ∇V(x) and f* = ∇V(x) − K_p (x − x*) − K_d ẋ  [2, 2K]
  const torch::Tensor gradient = model_.PotentialGradient(x);
  torch::Tensor forces = torch::cat({gradient, gradient - kp_ * (x - target_) - kd_ * xdot}, 0);
  torch::Tensor b = model_.InputMatrix(x).reshape({n, a});  // [2K, A]
  // Rows: the columns of M⁻¹B [A, 2K], for the input_acceleration figure.
  torch::Tensor accel = b.t() * inverse_mass_;
  if (options_.tangent_projection) {
    forces = model_.ProjectTangent(x.expand({2, n}), forces);
    b = model_.ProjectTangent(x.expand({a, n}), b.t().contiguous()).t();
  }
  accel = model_.ProjectTangent(x.expand({a, n}), accel.contiguous());
  // [2, A]: row 0 the gravity compensation, row 1 the whole action (the pseudo-inverse is linear).
  const torch::Tensor u =
      torch::matmul(forces, at::linalg_pinv(b, kPinvRcond).t()).contiguous();
  const double* p = u.data_ptr<double>();
  ControlAction out = LimitAction({p + a, p + 2 * a}, {p, p + a}, options_.u_max);
  const torch::Tensor norms =
      at::linalg_vector_norm(accel, 2, {1}, false, c10::nullopt).contiguous();
  out.input_acceleration.assign(norms.data_ptr<double>(), norms.data_ptr<double>() + a);
  return out;
}

ControlAction LimitAction(std::vector<double> unclipped, std::vector<double> gravity,
                          double u_max) {
  if (gravity.size() != unclipped.size()) {
    throw InputError("the gravity part has " + std::to_string(gravity.size()) +
                     " components, the action " + std::to_string(unclipped.size()));
  }
  ControlAction out;
  for (size_t i = 0; i < unclipped.size(); ++i) {
    if (!std::isfinite(unclipped[i]) || !std::isfinite(gravity[i])) {
      throw NumericalError("the controller's action is not finite");
    }
  }
  out.gravity = std::move(gravity);
  out.unclipped = std::move(unclipped);
  out.u = out.unclipped;
  if (u_max > 0) {
    for (double& v : out.u) v = std::clamp(v, -u_max, u_max);
  }
  return out;
}

}  // namespace keycld
