// Exact models of the cartpole and the acrobot written in keypoint coordinates: the mass
// matrix, potential energy and input matrix KeyCLD (docs/method.md §5, §10) would learn if it
// learned them exactly, derived from the MuJoCo model and the camera. A reference for the
// controller (no learning involved) and for tests of the closed loop, like TruePendulumModel.
//
// Derivation (docs/method.md §10). A rigid link hinged at P with mass m, centre of mass at
// distance c from P and moment of inertia I_P about the hinge axis is dynamically equivalent
// to a point mass m·c/d at distance d = I_P/(m·c) along the link plus m − m·c/d at P (same total
// mass, centre of mass and inertia). The cameras see the plane of motion face-on, so a world
// point (x, z) in that plane maps to the image point s·(x − x₀, z − z₀) (s: normalized units per
// metre, from Environment::ProjectToImage).
//  - Cartpole: keypoint 1 at the cart's centre (cart mass + the pole's remainder), keypoint 2
//    at d along the pole. Constraints: y₁ = s·(z_cart − z₀) (the rail) and ‖p₂ − p₁‖ = s·d.
//  - Acrobot: the upper arm turns about the fixed shoulder, so only its kinetic energy matters:
//    I_shoulder / l₁² at the elbow; the lower arm splits into d along it and its remainder at
//    the elbow. Keypoint 1 at the elbow, keypoint 2 at d along the lower arm. Constraints:
//    ‖p₁ − p_shoulder‖ = s·l₁ (the shoulder is the image point of the pivot) and ‖p₂ − p₁‖ = s·d.
// Kinetic energy ½ Σ m_k ‖ṗ_k‖² / s² gives M = diag(m_k / s²). The potential is the true
// gravity potential, linear in the keypoints' heights: V = Σ w_k y_k (J). B maps the actuator
// forces (gear × u on each joint) to keypoint forces whose generalised forces equal them: a
// slide joint's force acts on keypoint 1 along x (gear / s); a torque τ on the absolute angle of
// a link a → b is the force τ (r_y, −r_x) / ‖r‖² on b and its opposite on a (r = p_b − p_a);
// the acrobot's elbow angle is relative, so its torque acts on the lower arm's absolute angle
// and, with the opposite sign, on the upper arm's.
#pragma once

#include <torch/torch.h>

#include <array>
#include <memory>
#include <span>
#include <vector>

#include "keycld/control/control_model.h"
#include "keycld/dynamics/lagrangian.h"
#include "keycld/sim/environment.h"

namespace keycld {

class KnownModel : public ControlModel {
 public:
  /// Reads the physical constants from `env` (a cartpole or an acrobot; InputError for the
  /// pendulum, which has TruePendulumModel, for joints with damping, stiffness or friction, and
  /// when the camera does not see the plane of motion face-on) for images of `image_size`
  /// pixels. `env` must outlive the model: EstimateKeypoints reads its state.
  KnownModel(const Environment& env, int image_size);
  KnownModel(const KnownModel&) = delete;
  KnownModel& operator=(const KnownModel&) = delete;

  int num_keypoints() const override { return 2; }
  int action_dim() const override { return nu_; }
  int image_size() const override { return image_size_; }
  /// An oracle: the equivalent point masses' positions at the environment's current state,
  /// projected into the image; the image's content is not read, only its size checked. [1, 4].
  torch::Tensor EstimateKeypoints(std::span<const uint8_t> rgb) override;
  torch::Tensor Potential(const torch::Tensor& x) override;
  torch::Tensor PotentialGradient(const torch::Tensor& x) override;
  torch::Tensor InputMatrix(const torch::Tensor& x) override;
  torch::Tensor MassDiagonal() override;
  torch::Tensor ProjectTangent(const torch::Tensor& x, const torch::Tensor& v) override;

  /// The constrained acceleration ẍ of docs/method.md §5 with these M, V, B and Φ: x, ẋ [B, 4],
  /// u [A] or [B, A] → [B, 4] (normalized units / s²).
  torch::Tensor Acceleration(const torch::Tensor& x, const torch::Tensor& xdot,
                             const torch::Tensor& u);

  /// The keypoints of a joint state q (the simulator's qpos): normalized image coordinates
  /// [4], through MuJoCo's kinematics on a scratch copy of the model.
  std::array<double, 4> KeypointsOfState(std::span<const double> qpos) const;

  /// Scale s (normalized units per metre), point masses m_k (kg), the distance d of keypoint 2
  /// from its hinge (m), the gravity weights w_k (J per normalized unit of height).
  double scale() const { return scale_; }
  std::array<double, 2> masses() const { return mass_; }
  double distance() const { return distance_; }
  std::array<double, 2> gravity_weights() const { return weight_; }

 private:
  // Keypoint world positions (x, z) in the current state of `data`.
  std::array<std::array<double, 2>, 2> WorldKeypoints(const mjData* data) const;
  std::array<double, 4> ToImage(const std::array<std::array<double, 2>, 2>& world) const;

  const Environment& env_;
  EnvName name_;
  int image_size_, nu_;
  int link_body_ = -1;    // the body whose centre of mass places keypoint 2
  int hinge_joint_ = -1;  // that body's hinge (anchor = keypoint 1)
  double scale_ = 0, distance_ = 0, com_distance_ = 0;
  std::array<double, 2> origin_{};  // world (x, z) of the image centre in the plane of motion
  std::array<double, 2> mass_{}, weight_{};
  std::array<double, 2> gear_{};
  double rail_y_ = 0, upper_length_ = 0;  // cartpole: the rail's image height; acrobot: s·l₁
  std::shared_ptr<LagrangianDynamics> dynamics_;
};

}  // namespace keycld
