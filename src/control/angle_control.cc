#include "keycld/control/angle_control.h"

#include <mujoco/mujoco.h>

#include <cmath>
#include <string>

#include "keycld/models/chain_vae_model.h"
#include "keycld/models/lag_vae_model.h"
#include "keycld/util/error.h"
#include "keycld/util/tensor_values.h"

namespace keycld {

namespace {

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

LearnedAngleControlModel::LearnedAngleControlModel(Model model) : model_(std::move(model)) {
  if (!model_) throw InputError("the angle controller needs a loaded model");
  angle_ = dynamic_cast<LagVaeModelImpl*>(model_.get());
  chain_ = dynamic_cast<ChainLagVaeModelImpl*>(model_.get());
  if (angle_ == nullptr && chain_ == nullptr) {
    throw InputError(
        "the angle law (Lag-caVAE's energy shaping in q) needs a lag-vae or lag-cavae model, got "
        "'" +
        model_->spec().model + "' (use the keypoint law for it)");
  }
  options_ = model_->parameters().front().options().requires_grad(false);
}

std::vector<CoordinateKind> LearnedAngleControlModel::kinds() const {
  return chain_ != nullptr ? chain_->kinds() : std::vector<CoordinateKind>{CoordinateKind::kAngle};
}

int LearnedAngleControlModel::action_dim() const { return model_->spec().action_dim; }

int LearnedAngleControlModel::image_size() const { return model_->spec().image_size; }

torch::Tensor LearnedAngleControlModel::Row(const std::vector<double>& v) const {
  if (v.size() != kinds().size()) {
    throw InputError("the model has " + std::to_string(kinds().size()) + " coordinate(s), got " +
                     std::to_string(v.size()));
  }
  return torch::tensor(v, torch::kFloat64)
      .reshape({1, int64_t(v.size())})
      .to(options_.device(), options_.dtype().toScalarType());
}

std::vector<double> LearnedAngleControlModel::EstimateCoordinates(std::span<const uint8_t> rgb) {
  const int64_t s = image_size();
  CheckImage(rgb, int(s));
  c10::InferenceMode inference;
  auto image = torch::from_blob(const_cast<uint8_t*>(rgb.data()), {1, s, s, 3}, torch::kUInt8)
                   .to(options_.device())
                   .permute({0, 3, 1, 2})
                   .to(options_.dtype().toScalarType())
                   .div_(255.0);
  // Encode's states: a unit (cos q, sin q) per angle, (x, 0) per translation.
  const std::vector<double> pairs = TensorValues(model_->Encode(image).keypoints);
  std::vector<double> q;
  const std::vector<CoordinateKind> k = kinds();
  for (size_t i = 0; i < k.size(); ++i) {
    const double a = pairs[2 * i], b = pairs[2 * i + 1];
    if (!std::isfinite(a) || !std::isfinite(b)) {
      throw NumericalError("the encoder's posterior mean is not finite");
    }
    q.push_back(k[i] == CoordinateKind::kAngle ? std::atan2(b, a) : a);
  }
  return q;
}

double LearnedAngleControlModel::PotentialAt(const std::vector<double>& q) {
  c10::InferenceMode inference;
  torch::Tensor x = Row(q);
  if (chain_ != nullptr) return chain_->lagrangian()->Potential(x).item<double>();
  return angle_->lagrangian()->Potential(torch::cat({x.cos(), x.sin()}, 1)).item<double>();
}

std::vector<double> LearnedAngleControlModel::PotentialGradientAt(const std::vector<double>& q) {
  torch::AutoGradMode enable_grad(true);
  torch::Tensor x = Row(q).requires_grad_(true);
  torch::Tensor v = chain_ != nullptr
                        ? chain_->lagrangian()->Potential(x)
                        : angle_->lagrangian()->Potential(torch::cat({x.cos(), x.sin()}, 1));
  return TensorValues(torch::autograd::grad({v.sum()}, {x})[0]);
}

std::vector<double> LearnedAngleControlModel::InputGainAt(const std::vector<double>& q) {
  c10::InferenceMode inference;
  torch::Tensor x = Row(q);
  if (chain_ != nullptr) return TensorValues(chain_->lagrangian()->InputGain(x));
  return TensorValues(angle_->lagrangian()->input_gain->forward(torch::cat({x.cos(), x.sin()}, 1)));
}

std::vector<double> LearnedAngleControlModel::MassAt(const std::vector<double>& q) {
  c10::InferenceMode inference;
  torch::Tensor x = Row(q);
  if (chain_ != nullptr) return TensorValues(chain_->lagrangian()->Mass(x));
  return TensorValues(angle_->lagrangian()->Mass(torch::cat({x.cos(), x.sin()}, 1)));
}

TrueAngleModel::TrueAngleModel(const Environment& env, int image_size)
    : env_(env), pendulum_(env, image_size) {}

double TrueAngleModel::EstimateAngle(std::span<const uint8_t> rgb) {
  CheckImage(rgb, image_size());
  return WrapAngle(env_.qpos().at(0));
}

TrueCoordinateModel::TrueCoordinateModel(const Environment& env, int image_size)
    : env_(env), scratch_(env), image_size_(image_size) {
  const mjModel* m = env.model();
  if (m->nq != m->nv) throw InputError(env.system_name() + ": nq differs from nv");
  for (int j = 0; j < m->njnt; ++j) {
    if (m->jnt_type[j] == mjJNT_HINGE) {
      kinds_.push_back(CoordinateKind::kAngle);
    } else if (m->jnt_type[j] == mjJNT_SLIDE) {
      kinds_.push_back(CoordinateKind::kTranslation);
    } else {
      throw InputError(env.system_name() + ": the coordinate law's true model takes hinge and " +
                       "slide joints only");
    }
  }
  for (int a = 0; a < m->nu; ++a) {
    if (m->actuator_gaintype[a] != mjGAIN_FIXED || m->actuator_biastype[a] != mjBIAS_NONE) {
      throw InputError(env.system_name() + ": the coordinate law's true model takes motors " +
                       "(fixed gain, no bias) only");
    }
  }
  if (image_size < 1) throw InputError("the image size must be ≥ 1");
}

std::vector<double> TrueCoordinateModel::EstimateCoordinates(std::span<const uint8_t> rgb) {
  CheckImage(rgb, image_size_);
  std::vector<double> q = env_.qpos();
  for (size_t i = 0; i < q.size(); ++i) {
    if (kinds_[i] == CoordinateKind::kAngle) q[i] = WrapAngle(q[i]);
  }
  return q;
}

void TrueCoordinateModel::SetState(const std::vector<double>& q) {
  if (q.size() != kinds_.size()) {
    throw InputError(env_.system_name() + " has " + std::to_string(kinds_.size()) +
                     " coordinate(s), got " + std::to_string(q.size()));
  }
  if (q == state_) return;  // the law asks for V, ∂V/∂q, g and M at the same q
  const std::vector<double> zero(q.size(), 0.0);
  scratch_.Reset(q, zero);
  state_ = q;
}

double TrueCoordinateModel::PotentialAt(const std::vector<double>& q) {
  SetState(q);
  mj_energyPos(scratch_.model(), scratch_.data());
  return scratch_.data()->energy[0];
}

std::vector<double> TrueCoordinateModel::PotentialGradientAt(const std::vector<double>& q) {
  SetState(q);
  // M q̈ + qfrc_bias = qfrc_passive + qfrc_actuator: at q̇ = 0 the bias is gravity's ∂V/∂q and
  // the passive force the springs' −∂V/∂q.
  std::vector<double> grad(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    grad[i] = scratch_.data()->qfrc_bias[i] - scratch_.data()->qfrc_passive[i];
  }
  return grad;
}

std::vector<double> TrueCoordinateModel::InputGainAt(const std::vector<double>& q) {
  SetState(q);
  const int n = int(q.size()), A = scratch_.nu();
  const mjtNum* moment = scratch_.data()->actuator_moment;  // [A, n], gear included
  std::vector<double> g(size_t(n * A));
  for (int i = 0; i < n; ++i) {
    for (int a = 0; a < A; ++a) {
      // A motor's force is gainprm[0]·u.
      g[size_t(i * A + a)] = moment[a * n + i] * scratch_.model()->actuator_gainprm[a * mjNGAIN];
    }
  }
  return g;
}

std::vector<double> TrueCoordinateModel::MassAt(const std::vector<double>& q) {
  SetState(q);
  std::vector<double> M(q.size() * q.size());
  mj_fullM(scratch_.model(), M.data(), scratch_.data()->qM);
  return M;
}

double TrueAngleModel::Potential(double q) { return pendulum_.gravity_moment() * std::cos(q); }

double TrueAngleModel::PotentialDerivative(double q) {
  return -pendulum_.gravity_moment() * std::sin(q);
}

std::vector<double> TrueAngleModel::InputGain(double) { return {pendulum_.gear()}; }

double TrueAngleModel::Mass(double) { return pendulum_.inertia(); }

std::vector<double> CoordinateErrors(const std::vector<CoordinateKind>& kinds,
                                     const std::vector<double>& q, const std::vector<double>& target) {
  if (q.size() != kinds.size() || target.size() != kinds.size()) {
    throw InputError("the model has " + std::to_string(kinds.size()) + " coordinate(s), got " +
                     std::to_string(q.size()) + " and " + std::to_string(target.size()));
  }
  std::vector<double> e;
  for (size_t i = 0; i < kinds.size(); ++i) {
    e.push_back(kinds[i] == CoordinateKind::kAngle ? WrapAngle(q[i] - target[i]) : q[i] - target[i]);
  }
  return e;
}

AngleEnergyShapingController::AngleEnergyShapingController(AngleControlModel& model,
                                                           std::vector<double> target,
                                                           const ControllerOptions& options)
    : model_(model), target_(std::move(target)), kinds_(model.kinds()), options_(options) {
  options_.Validate();
  if (target_.size() != kinds_.size()) {
    throw InputError("the target has " + std::to_string(target_.size()) +
                     " coordinate(s), the model " + std::to_string(kinds_.size()));
  }
  for (double v : target_) {
    if (!std::isfinite(v)) throw InputError("the target coordinates are not finite");
  }
}

ControlAction AngleEnergyShapingController::Act(const std::vector<double>& q,
                                                const std::vector<double>& qdot) {
  const int64_t n = int64_t(kinds_.size()), A = model_.action_dim();
  if (int64_t(q.size()) != n || int64_t(qdot.size()) != n) {
    throw InputError("the law takes " + std::to_string(n) + " coordinate(s) and rate(s), got " +
                     std::to_string(q.size()) + " and " + std::to_string(qdot.size()));
  }
  for (size_t i = 0; i < q.size(); ++i) {
    if (!std::isfinite(q[i]) || !std::isfinite(qdot[i])) {
      throw InputError("the estimated coordinates and their rates must be finite");
    }
  }
  const auto f64 = torch::kFloat64;
  const torch::Tensor M = torch::tensor(model_.MassAt(q), f64).reshape({n, n});
  const torch::Tensor S = options_.gain_scale == GainScale::kMass ? M : torch::eye(n, f64);
  const torch::Tensor dv = torch::tensor(model_.PotentialGradientAt(q), f64);
  const torch::Tensor e = torch::tensor(CoordinateErrors(kinds_, q, target_), f64);
  const torch::Tensor f = dv - options_.kp * S.matmul(e) - options_.kd * S.matmul(torch::tensor(qdot, f64));
  const torch::Tensor g = torch::tensor(model_.InputGainAt(q), f64).reshape({n, A});
  // gᵀ(g gᵀ)⁻¹ as the pseudo-inverse g⁺ (0 for g = 0).
  const torch::Tensor pinv = at::linalg_pinv(g);  // [A, n]
  ControlAction out =
      LimitAction(TensorValues(pinv.matmul(f)), TensorValues(pinv.matmul(dv)), options_.u_max);
  // How hard each actuator pushes: ‖M⁻¹ g_a‖ (rad/s² or the model's unit/s² per unit).
  out.input_acceleration = TensorValues(at::linalg_solve(M, g).norm(2, 0));
  return out;
}

}  // namespace keycld
