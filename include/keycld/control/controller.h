// Energy-shaping control in keypoint coordinates (KeyCLD §10 / docs/method.md §10):
//   u = B(x)⁺ (∇V(x) − K_p (x − x*) − K_d ẋ)
// cancels the model's gravity (∇V), replaces it by a spring to the target keypoints x* and adds
// damping.
//
// Two refinements, both options:
// - Gain units. A learned model's energy scale is arbitrary (V, B and M can be scaled together
//   without changing the motion), so a scalar K_p means nothing across models. By default the
//   gains are per unit of the model's mass: K_p = k_p·M, K_d = k_d·M. Then k_p is a squared
//   angular frequency (1/s²) and k_d a rate (1/s) whatever the model's units; for the pendulum
//   the closed loop is θ̈ = −k_p sin(θ − θ*) − k_d θ̇ exactly. GainScale::kUnit uses the scalars
//   as they are (K_p = k_p·1).
// - Tangent projection. Under the holonomic constraints only the part of a force tangent to
//   Φ(x) = 0 moves the system (the normal part is taken by the constraint forces Dᵀλ), and a
//   learned ∇V and B are free in their normal parts. By default the pseudo-inverse is taken on
//   the tangent space: u = (P B)⁺ P f* with P v = v − D⁺ D v; for a B without normal part (the
//   true pendulum) this is the same u as B⁺ f*. `tangent_projection = false` gives B⁺ f*.
// An optional actuator limit clips each component of u to [−u_max, u_max] afterwards.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "keycld/control/control_model.h"

namespace keycld {

enum class GainScale {
  kMass,  ///< K = k·M (default): k_p in 1/s², k_d in 1/s
  kUnit,  ///< K = k·1: the paper's scalar gains in the model's own units
};
template <>
struct NameTable<GainScale> {
  static constexpr const char* kWhat = "gain scale";
  static constexpr std::pair<GainScale, const char*> kEntries[] = {{GainScale::kMass, "mass"},
                                                                   {GainScale::kUnit, "unit"}};
};
/// Parses "mass" | "unit"; InputError otherwise.
GainScale ParseGainScale(const std::string& name);
std::string GainScaleName(GainScale scale);

struct ControllerOptions {
  double kp = 25.0;  ///< stiffness gain k_p (1/s² with kMass)
  double kd = 10.0;  ///< damping gain k_d (1/s with kMass); 2·sqrt(k_p) is critical damping
  GainScale gain_scale = GainScale::kMass;
  bool tangent_projection = true;
  double u_max = 0.0;  ///< actuator limit (actuator units); 0 = none

  /// Throws InputError unless k_p > 0, k_d ≥ 0 and u_max ≥ 0, all finite.
  void Validate() const;
};

/// What one control step computed.
struct ControlAction {
  std::vector<double> u;          ///< applied action [A] (after the limit)
  std::vector<double> unclipped;  ///< B⁺ f* before the limit [A]
  /// The gravity compensation in `unclipped` [A]: the part the potential gives, (P B)⁺ P ∇V for
  /// the keypoint law, g(g gᵀ)⁻¹ ∂V/∂q for the angle law; the rest is the feedback's
  /// (−K_p(x − x*) − K_d ẋ). Physical actuator units for any model, so the terms of two models
  /// of the same system can be compared (control/diagnosis.h).
  std::vector<double> gravity;
  /// How hard each actuator pushes the system by the model [A]: the norm of the tangent part of
  /// column i of M⁻¹B (keypoint law: normalized image units/s² per actuator unit; angle law:
  /// |g_i|/M(q) in rad/s² per unit). Invariant to the model's energy scale (V, B and M scaled
  /// together), so a learned model's value can be compared with the known model's; the gravity
  /// part divides by it, so where it falls towards 0 the action blows up.
  std::vector<double> input_acceleration;
};

/// The action of a law's value `unclipped` [A] and its gravity part `gravity` [A]: each
/// component of `unclipped` clipped to [−u_max, u_max] (u_max = 0: no limit). NumericalError
/// when a component of either is not finite, InputError when their sizes differ.
ControlAction LimitAction(std::vector<double> unclipped, std::vector<double> gravity, double u_max);

class EnergyShapingController {
 public:
  /// `target` x* [1, 2K] or [2K] (normalized image coordinates). Throws InputError for a
  /// target of the wrong width or invalid options. `model` must outlive the controller.
  EnergyShapingController(ControlModel& model, const torch::Tensor& target,
                          const ControllerOptions& options);

  /// The action at the estimated state x, ẋ [1, 2K] (or [2K]). Throws NumericalError when the
  /// result is not finite.
  ControlAction Act(const torch::Tensor& x, const torch::Tensor& xdot);

  const torch::Tensor& target() const { return target_; }
  const ControllerOptions& options() const { return options_; }

 private:
  ControlModel& model_;
  torch::Tensor target_;  // [1, 2K] float64
  ControllerOptions options_;
  torch::Tensor kp_, kd_;       // [2K] float64
  torch::Tensor inverse_mass_;  // M⁻¹'s diagonal [1, 2K] float64 (M is constant)
};

}  // namespace keycld
