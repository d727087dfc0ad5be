// The true pendulum of assets/envs/pendulum.xml written in keypoint coordinates: the
// potential energy, input matrix and mass matrix that KeyCLD (docs/method.md §1, §5) would learn if
// it learned them exactly, derived from the MuJoCo model and the camera projection. A reference for
// the controller (no learning involved) and for tests of the closed loop.
//
// Derivation. The camera looks along +y at the plane of motion y = 0 from the pivot's height, so
// the projection of the plane is a scale s (normalized units per metre) about the image centre,
// which is the pivot. With θ the hinge angle (0 = up, positive towards +x) and l the pivot–tip
// distance, the tip keypoint is p = s·l·(sin θ, cos θ), on the circle ‖p‖ = R = s·l. Then
//   θ = atan2(p_x, p_y),            ∂θ/∂p = (p_y, −p_x) / ‖p‖²;
//   kinetic energy  ½ I θ̇² = ½ (I / R²) ‖ṗ‖²   ⇒ M = (I / R²) · 1 (I: inertia about the hinge,
//                                                 MuJoCo's joint-space mass matrix);
//   potential       V = m g r_c cos θ = m g r_c p_y / R (r_c: pivot–centre-of-mass distance);
//   input matrix    B(p) = gear · ∂θ/∂p (virtual work gear·u·δθ = (B u)·δp).
// With the constraint ‖p‖ − R = 0 the constrained Euler–Lagrange equations of docs/method.md §5
// give I θ̈ = m g r_c sin θ + gear·u, MuJoCo's equation of motion. Energies are in J.
#pragma once

#include <torch/torch.h>

#include "keycld/control/control_model.h"
#include "keycld/dynamics/lagrangian.h"
#include "keycld/sim/environment.h"

namespace keycld {

class TruePendulumModel : public ControlModel {
 public:
  /// Reads the physical constants from `env` (a pendulum; InputError otherwise, or when the
  /// camera does not see the plane of motion face-on with the pivot at the image centre) for
  /// images of `image_size` pixels. `env` must outlive the model: EstimateKeypoints reads it.
  TruePendulumModel(const Environment& env, int image_size);
  TruePendulumModel(const TruePendulumModel&) = delete;
  TruePendulumModel& operator=(const TruePendulumModel&) = delete;

  int num_keypoints() const override { return 1; }
  int action_dim() const override { return 1; }
  int image_size() const override { return image_size_; }
  /// An oracle: the simulator's tip projected into the image (Environment::
  /// KeypointImagePositions) at the environment's current state; the image's content is not
  /// read, only its size checked. [1, 2].
  torch::Tensor EstimateKeypoints(std::span<const uint8_t> rgb) override;
  torch::Tensor Potential(const torch::Tensor& x) override;
  torch::Tensor PotentialGradient(const torch::Tensor& x) override;
  torch::Tensor InputMatrix(const torch::Tensor& x) override;
  torch::Tensor MassDiagonal() override;
  torch::Tensor ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) override;

  /// The constrained acceleration ẍ of docs/method.md §5 with these V, B, M and Φ: x, ẋ [B, 2], u
  /// [1] or [B, 1] → [B, 2] (normalized units / s²).
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u);

  /// Scale s of the projection (normalized units per metre).
  double scale() const { return scale_; }
  /// Radius R = s·l of the tip's circle (normalized units).
  double radius() const { return radius_; }
  /// Inertia about the hinge I (kg m²), m g r_c (J), actuator gear.
  double inertia() const { return inertia_; }
  double gravity_moment() const { return gravity_moment_; }
  double gear() const { return gear_; }

 private:
  const Environment& env_;
  int image_size_;
  double scale_, radius_, inertia_, gravity_moment_, gear_;
  std::shared_ptr<LagrangianDynamics> dynamics_;
};

}  // namespace keycld
