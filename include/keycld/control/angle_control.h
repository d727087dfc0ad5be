// Lag-caVAE's own control law (docs/baselines.md, "Control"; docs/method.md §9): energy shaping
// with damping injection in the model's generalised coordinate q, for models of one angle (the
// pendulum: lag-vae and lag-cavae, whose states are (cos q, sin q), not image keypoints):
//   u = gᵀ(g gᵀ)⁻¹ (∂V/∂q − K_p (q − q*) − K_d q̇),
// with q − q* wrapped to (−π, π] (the shortest way round the circle). With the model's equation
// of motion M(q) q̈ = g(q)·u − ∂V/∂q − ½ q̇² ∂M/∂q, the closed loop is
//   M(q) q̈ = −K_p (q − q*) − K_d q̇ − ½ q̇² ∂M/∂q
// (the learned gravity cancelled and replaced by a spring to q*, plus damping). Gains as in
// controller.h: per unit of the model's mass by default (K = k·M(q), k_p in 1/s², k_d in 1/s),
// or the published scalars (GainScale::kUnit). The keypoint controller of controller.h uses the
// same options; tangent_projection has no meaning here (one coordinate, no constraints).
//
// Two models of the angle: the trained lag-vae / lag-cavae (LearnedAngleControlModel: q from the
// encoder's posterior mean, V, g, M from its Lagrangian networks) and the true pendulum
// (TrueAngleModel: q from the simulator, MuJoCo's constants), a reference for the law.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>

#include "keycld/control/controller.h"
#include "keycld/control/true_pendulum.h"
#include "keycld/models/model.h"
#include "keycld/sim/environment.h"

namespace keycld {

class LagVaeModelImpl;

/// What the angle law needs from a model of one angle coordinate q (rad, in the model's own
/// convention: a learned model's zero and direction are its own). Values are float64.
class AngleControlModel {
 public:
  virtual ~AngleControlModel() = default;
  /// A actuators (the entries of g).
  virtual int action_dim() const = 0;
  /// Side S of the square images EstimateAngle reads (pixels).
  virtual int image_size() const = 0;
  /// q of one frame: rgb uint8 [S, S, 3], row 0 = top → rad in (−π, π]. InputError for a buffer
  /// of another size.
  virtual double EstimateAngle(std::span<const uint8_t> rgb) = 0;
  /// V(q) (the model's energy unit).
  virtual double Potential(double q) = 0;
  /// ∂V/∂q (energy unit per rad).
  virtual double PotentialDerivative(double q) = 0;
  /// g(q) [A]: the generalised force of u is g(q)·u.
  virtual std::vector<double> InputGain(double q) = 0;
  /// M(q) > 0 (energy unit · s²).
  virtual double Mass(double q) = 0;
};

/// A trained lag-vae or lag-cavae model (LagVaeModelImpl) behind AngleControlModel: q = atan2 of
/// the encoder's posterior mean (no sampling), V, ∂V/∂q (autograd through ∂/∂q = −sin q ∂/∂cos q +
/// cos q ∂/∂sin q), g and M from its AngleLagrangian. Runs on the device and dtype the model has
/// when this is constructed.
class LearnedAngleControlModel : public AngleControlModel {
 public:
  /// InputError unless `model` is a lag-vae or lag-cavae model.
  explicit LearnedAngleControlModel(Model model);

  int action_dim() const override;
  int image_size() const override;
  double EstimateAngle(std::span<const uint8_t> rgb) override;
  double Potential(double q) override;
  double PotentialDerivative(double q) override;
  std::vector<double> InputGain(double q) override;
  double Mass(double q) override;

 private:
  torch::Tensor CosSin(double q) const;  // [1, 2] on the model's device and dtype
  Model model_;
  LagVaeModelImpl* lag_;          // model_ as its lag-vae / lag-cavae implementation
  torch::TensorOptions options_;  // the parameters' device and dtype, read once
};

/// The true pendulum of assets/envs/pendulum.xml in its hinge angle θ (0 = up, MuJoCo's
/// convention): V = m g r_c cos θ (J), g = gear, M = I (MuJoCo's joint-space inertia), from
/// TruePendulumModel. EstimateAngle is an oracle: the simulator's θ at the environment's current
/// state (the image's size is checked, its content not read). `env` must outlive the model.
class TrueAngleModel : public AngleControlModel {
 public:
  /// InputError as TruePendulumModel (not the pendulum, a hinge with damping, …).
  TrueAngleModel(const Environment& env, int image_size);

  int action_dim() const override { return 1; }
  int image_size() const override { return pendulum_.image_size(); }
  double EstimateAngle(std::span<const uint8_t> rgb) override;
  double Potential(double q) override;
  double PotentialDerivative(double q) override;
  std::vector<double> InputGain(double q) override;
  double Mass(double q) override;

 private:
  const Environment& env_;
  TruePendulumModel pendulum_;
};

/// q − q* wrapped to (−π, π] (rad).
double WrapAngle(double angle);

class AngleEnergyShapingController {
 public:
  /// `target` q* (rad, the model's convention; finite). InputError for invalid options or a
  /// target that is not finite. `model` must outlive the controller.
  AngleEnergyShapingController(AngleControlModel& model, double target,
                               const ControllerOptions& options);

  /// u at the estimated q, q̇ (rad, rad/s). NumericalError when the action is not finite (g = 0
  /// gives no action: the pseudo-inverse of a zero row is zero).
  ControlAction Act(double q, double qdot);

  double target() const { return target_; }
  const ControllerOptions& options() const { return options_; }

 private:
  AngleControlModel& model_;
  double target_;
  ControllerOptions options_;
};

}  // namespace keycld
