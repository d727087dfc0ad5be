#include "keycld/control/angle_control.h"

#include <cmath>
#include <string>

#include "keycld/models/lag_vae_model.h"
#include "keycld/util/error.h"

namespace keycld {

namespace {

LagVaeModelImpl* AsLagModel(Model& model) {
  if (!model) throw InputError("the angle controller needs a loaded model");
  auto* lag = dynamic_cast<LagVaeModelImpl*>(model.get());
  if (lag == nullptr) {
    throw InputError(
        "the angle law (Lag-caVAE's energy shaping in q) needs a lag-vae or "
        "lag-cavae model, got '" +
        model->spec().model + "' (use the keypoint law for it)");
  }
  return lag;
}

void CheckImage(std::span<const uint8_t> rgb, int size) {
  if (int64_t(rgb.size()) != int64_t(size) * size * 3) {
    throw InputError("the model reads " + std::to_string(size) + "x" + std::to_string(size) +
                     " RGB images, got a buffer of " + std::to_string(rgb.size()) + " bytes");
  }
}

}  // namespace

double WrapAngle(double angle) {
  double e = std::remainder(angle, 2 * M_PI);  // [−π, π]
  if (e <= -M_PI) e += 2 * M_PI;
  return e;
}

LearnedAngleControlModel::LearnedAngleControlModel(Model model)
    : model_(std::move(model)),
      lag_(AsLagModel(model_)),
      options_(lag_->parameters().front().options().requires_grad(false)) {}

int LearnedAngleControlModel::action_dim() const { return model_->spec().action_dim; }

int LearnedAngleControlModel::image_size() const { return model_->spec().image_size; }

torch::Tensor LearnedAngleControlModel::CosSin(double q) const {
  return torch::tensor({std::cos(q), std::sin(q)}, torch::kFloat64)
      .reshape({1, 2})
      .to(options_.device(), options_.dtype().toScalarType());
}

double LearnedAngleControlModel::EstimateAngle(std::span<const uint8_t> rgb) {
  const int64_t s = image_size();
  CheckImage(rgb, int(s));
  c10::InferenceMode inference;
  auto image = torch::from_blob(const_cast<uint8_t*>(rgb.data()), {1, s, s, 3}, torch::kUInt8)
                   .to(options_.device())
                   .permute({0, 3, 1, 2})
                   .to(options_.dtype().toScalarType())
                   .div_(255.0);
  const torch::Tensor mean = lag_->Posterior(image).mean.to(torch::kCPU, torch::kFloat64);
  const double c = mean[0][0].item<double>(), sn = mean[0][1].item<double>();
  if (!std::isfinite(c) || !std::isfinite(sn) || (c == 0 && sn == 0)) {
    throw NumericalError("the encoder's mean direction is not finite or zero");
  }
  return std::atan2(sn, c);
}

double LearnedAngleControlModel::Potential(double q) {
  c10::InferenceMode inference;
  return lag_->lagrangian()->Potential(CosSin(q)).item<double>();
}

double LearnedAngleControlModel::PotentialDerivative(double q) {
  torch::AutoGradMode enable_grad(true);
  torch::Tensor cs = CosSin(q).requires_grad_(true);
  torch::Tensor v = lag_->lagrangian()->Potential(cs).sum();
  const torch::Tensor dv = torch::autograd::grad({v}, {cs})[0].to(torch::kCPU, torch::kFloat64);
  // ∂V/∂q = −sin q ∂V/∂cos q + cos q ∂V/∂sin q.
  return -std::sin(q) * dv[0][0].item<double>() + std::cos(q) * dv[0][1].item<double>();
}

std::vector<double> LearnedAngleControlModel::InputGain(double q) {
  c10::InferenceMode inference;
  const torch::Tensor g = lag_->lagrangian()
                              ->input_gain->forward(CosSin(q))
                              .to(torch::kCPU, torch::kFloat64)
                              .reshape({-1})
                              .contiguous();
  return {g.data_ptr<double>(), g.data_ptr<double>() + g.numel()};
}

double LearnedAngleControlModel::Mass(double q) {
  c10::InferenceMode inference;
  return lag_->lagrangian()->Mass(CosSin(q)).item<double>();
}

TrueAngleModel::TrueAngleModel(const Environment& env, int image_size)
    : env_(env), pendulum_(env, image_size) {}

double TrueAngleModel::EstimateAngle(std::span<const uint8_t> rgb) {
  CheckImage(rgb, image_size());
  return WrapAngle(env_.qpos().at(0));
}

double TrueAngleModel::Potential(double q) { return pendulum_.gravity_moment() * std::cos(q); }

double TrueAngleModel::PotentialDerivative(double q) {
  return -pendulum_.gravity_moment() * std::sin(q);
}

std::vector<double> TrueAngleModel::InputGain(double) { return {pendulum_.gear()}; }

double TrueAngleModel::Mass(double) { return pendulum_.inertia(); }

AngleEnergyShapingController::AngleEnergyShapingController(AngleControlModel& model, double target,
                                                           const ControllerOptions& options)
    : model_(model), target_(target), options_(options) {
  options_.Validate();
  if (!std::isfinite(target)) throw InputError("the target angle is not finite");
}

ControlAction AngleEnergyShapingController::Act(double q, double qdot) {
  if (!std::isfinite(q) || !std::isfinite(qdot)) {
    throw InputError("the estimated angle and its rate must be finite");
  }
  const double mass = model_.Mass(q);
  const double scale = options_.gain_scale == GainScale::kMass ? mass : 1.0;
  const double dv = model_.PotentialDerivative(q);
  const double force =
      dv - options_.kp * scale * WrapAngle(q - target_) - options_.kd * scale * qdot;
  const std::vector<double> g = model_.InputGain(q);
  double gg = 0;
  for (double v : g) gg += v * v;
  // gᵀ(g gᵀ)⁻¹ f for a row g; a zero row has the pseudo-inverse 0.
  std::vector<double> u, gravity;
  for (double v : g) {
    u.push_back(gg > 0 ? v * force / gg : 0.0);
    gravity.push_back(gg > 0 ? v * dv / gg : 0.0);
  }
  ControlAction out = LimitAction(std::move(u), std::move(gravity), options_.u_max);
  for (double v : g) out.input_acceleration.push_back(std::abs(v) / mass);
  return out;
}

}  // namespace keycld
