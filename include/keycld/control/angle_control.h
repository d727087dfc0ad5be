// Lag-caVAE's own control law (docs/baselines.md, "Control"; docs/method.md §9): energy shaping
// with damping injection in the model's generalised coordinates q (n of them: the pendulum's
// angle; the cartpole's cart translation and pole angle; the acrobot's two link angles; the
// lag-vae and lag-cavae models, whose states are not image keypoints):
//   u = gᵀ(g gᵀ)⁻¹ (∂V/∂q − K_p (q − q*) − K_d q̇),     g = g(q) [n, A],
// with each angle's q − q* wrapped to (−π, π] (the shortest way round the circle), a
// translation's not. With the model's equation of motion M(q) q̈ = g(q) u − ∂V/∂q − c(q, q̇)
// (c: the Coriolis and centrifugal terms) and g of full row rank, the closed loop is
//   M(q) q̈ = −K_p (q − q*) − K_d q̇ − c(q, q̇)
// (the learned gravity cancelled and replaced by a spring to q*, plus damping). Gains as in
// controller.h: per unit of the model's mass by default (K = k·M(q), k_p in 1/s², k_d in 1/s),
// or the published scalars (GainScale::kUnit). The pseudo-inverse gᵀ(g gᵀ)⁻¹ is computed as the
// Moore–Penrose pseudo-inverse g⁺ (equal for full row rank; 0 for g = 0). The keypoint
// controller of controller.h uses the same options; tangent_projection has no meaning here.
//
// Models of the coordinates: the trained lag-vae / lag-cavae of any built-in system
// (LearnedAngleControlModel: q from the encoders' posterior means, V, g, M from its Lagrangian
// networks) and the true pendulum (TrueAngleModel: q from the simulator, MuJoCo's constants), a
// reference for the law.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "keycld/control/controller.h"
#include "keycld/control/true_pendulum.h"
#include "keycld/model/coordinate_vae.h"
#include "keycld/models/model.h"
#include "keycld/sim/environment.h"

namespace keycld {

class LagVaeModelImpl;
class ChainLagVaeModelImpl;

/// What the law needs from a model of n generalised coordinates q (rad for an angle, the model's
/// own unit for a translation; a learned model's zeros and directions are its own). Values are
/// float64; vectors of q and q̇ have n entries.
class AngleControlModel {
 public:
  virtual ~AngleControlModel() = default;
  /// The coordinates' kinds (n = their number).
  virtual std::vector<CoordinateKind> kinds() const = 0;
  /// A actuators (the columns of g).
  virtual int action_dim() const = 0;
  /// Side S of the square images EstimateCoordinates reads (pixels).
  virtual int image_size() const = 0;
  /// q of one frame: rgb uint8 [S, S, 3], row 0 = top → [n], angles in (−π, π]. InputError for a
  /// buffer of another size.
  virtual std::vector<double> EstimateCoordinates(std::span<const uint8_t> rgb) = 0;
  /// V(q) (the model's energy unit).
  virtual double PotentialAt(const std::vector<double>& q) = 0;
  /// ∂V/∂q [n].
  virtual std::vector<double> PotentialGradientAt(const std::vector<double>& q) = 0;
  /// g(q) [n·A], row-major [n, A]: the generalised force of u is g(q) u.
  virtual std::vector<double> InputGainAt(const std::vector<double>& q) = 0;
  /// M(q) [n·n], row-major, positive definite.
  virtual std::vector<double> MassAt(const std::vector<double>& q) = 0;
};

/// A model of one angle written with scalars (the pendulum's): the vector methods call these.
class OneAngleControlModel : public AngleControlModel {
 public:
  std::vector<CoordinateKind> kinds() const final { return {CoordinateKind::kAngle}; }
  std::vector<double> EstimateCoordinates(std::span<const uint8_t> rgb) final {
    return {EstimateAngle(rgb)};
  }
  double PotentialAt(const std::vector<double>& q) final { return Potential(q.at(0)); }
  std::vector<double> PotentialGradientAt(const std::vector<double>& q) final {
    return {PotentialDerivative(q.at(0))};
  }
  std::vector<double> InputGainAt(const std::vector<double>& q) final { return InputGain(q.at(0)); }
  std::vector<double> MassAt(const std::vector<double>& q) final { return {Mass(q.at(0))}; }

  /// q of one frame (rad, in (−π, π]).
  virtual double EstimateAngle(std::span<const uint8_t> rgb) = 0;
  /// V(q).
  virtual double Potential(double q) = 0;
  /// ∂V/∂q (energy unit per rad).
  virtual double PotentialDerivative(double q) = 0;
  /// g(q) [A].
  virtual std::vector<double> InputGain(double q) = 0;
  /// M(q) > 0 (energy unit · s²).
  virtual double Mass(double q) = 0;
};

/// A trained lag-vae or lag-cavae model (LagVaeModelImpl for the pendulum, ChainLagVaeModelImpl
/// for the cartpole and the acrobot) behind AngleControlModel: q from the encoders' posterior
/// means (an angle's direction by atan2, a translation's mean; no sampling), V, ∂V/∂q by
/// autograd, g and M from its Lagrangian networks. Runs on the device and dtype the model has
/// when this is constructed.
class LearnedAngleControlModel : public AngleControlModel {
 public:
  /// InputError unless `model` is a lag-vae or lag-cavae model.
  explicit LearnedAngleControlModel(Model model);

  std::vector<CoordinateKind> kinds() const override;
  int action_dim() const override;
  int image_size() const override;
  std::vector<double> EstimateCoordinates(std::span<const uint8_t> rgb) override;
  double PotentialAt(const std::vector<double>& q) override;
  std::vector<double> PotentialGradientAt(const std::vector<double>& q) override;
  std::vector<double> InputGainAt(const std::vector<double>& q) override;
  std::vector<double> MassAt(const std::vector<double>& q) override;

 private:
  torch::Tensor Row(const std::vector<double>& v) const;  // [1, len] on the model's device/dtype
  Model model_;
  LagVaeModelImpl* angle_ = nullptr;       // the pendulum's form, or
  ChainLagVaeModelImpl* chain_ = nullptr;  // the two-coordinate form
  torch::TensorOptions options_;           // the parameters' device and dtype, read once
};

/// The true pendulum of assets/envs/pendulum.xml in its hinge angle θ (0 = up, MuJoCo's
/// convention): V = m g r_c cos θ (J), g = gear, M = I (MuJoCo's joint-space inertia), from
/// TruePendulumModel. EstimateAngle is an oracle: the simulator's θ at the environment's current
/// state (the image's size is checked, its content not read). `env` must outlive the model.
class TrueAngleModel : public OneAngleControlModel {
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

/// The true system in MuJoCo's own joint coordinates (hinge angles in rad, slide positions in
/// m; any system whose joints are hinges and slides, one coordinate each): V(q) by mj_energyPos
/// (gravity and springs, J), ∂V/∂q = qfrc_bias at q̇ = 0, M(q) by mj_fullM, g(q) = the actuator
/// moments (nv × nu). A reference for the law on every system, with exact terms.
/// EstimateCoordinates is an oracle: the simulator's qpos (hinges wrapped to (−π, π]) at the
/// environment's current state (the image's size is checked, its content not read). `env` must
/// outlive the model; the terms are evaluated on a private copy.
class TrueCoordinateModel : public AngleControlModel {
 public:
  /// InputError for a joint that is not a hinge or a slide (ball, free).
  TrueCoordinateModel(const Environment& env, int image_size);

  std::vector<CoordinateKind> kinds() const override { return kinds_; }
  int action_dim() const override { return env_.nu(); }
  int image_size() const override { return image_size_; }
  std::vector<double> EstimateCoordinates(std::span<const uint8_t> rgb) override;
  double PotentialAt(const std::vector<double>& q) override;
  std::vector<double> PotentialGradientAt(const std::vector<double>& q) override;
  std::vector<double> InputGainAt(const std::vector<double>& q) override;
  std::vector<double> MassAt(const std::vector<double>& q) override;

 private:
  void SetState(const std::vector<double>& q);  // scratch_ at q, q̇ = 0 (once per q)
  const Environment& env_;
  Environment scratch_;
  std::vector<double> state_;  // the q scratch_ holds (empty before the first)
  int image_size_;
  std::vector<CoordinateKind> kinds_;
};

/// q − q* wrapped to (−π, π] (rad).
double WrapAngle(double angle);

class AngleEnergyShapingController {
 public:
  /// `target` q* [n] (the model's convention; finite). InputError for invalid options or a
  /// target that is not finite or of another size. `model` must outlive the controller.
  AngleEnergyShapingController(AngleControlModel& model, std::vector<double> target,
                               const ControllerOptions& options);

  /// u at the estimated q, q̇ [n] (rad or the model's unit, per s). InputError for values that
  /// are not finite or of another size; NumericalError when the action is not finite.
  ControlAction Act(const std::vector<double>& q, const std::vector<double>& qdot);

  const std::vector<double>& target() const { return target_; }
  const ControllerOptions& options() const { return options_; }

 private:
  AngleControlModel& model_;
  std::vector<double> target_;
  std::vector<CoordinateKind> kinds_;
  ControllerOptions options_;
};

/// q − q* per coordinate: an angle's wrapped to (−π, π], a translation's as is.
std::vector<double> CoordinateErrors(const std::vector<CoordinateKind>& kinds,
                                     const std::vector<double>& q, const std::vector<double>& target);

}  // namespace keycld
