// The closed loop of docs/method.md §10 with the MuJoCo simulator: every step renders the camera
// frame, estimates the keypoints from it, estimates their velocity by a backward difference
// projected onto the constraints' tangent space, computes the energy-shaping action and steps
// the simulator. The controller sees only the images; the true state is recorded for judging.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "keycld/control/angle_control.h"
#include "keycld/control/control_model.h"
#include "keycld/control/controller.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/offscreen_renderer.h"

namespace keycld {

/// One step of the closed loop.
struct ControlStep {
  double time = 0;                 ///< s, simulator time of the frame (before this step)
  std::vector<double> qpos, qvel;  ///< true joint state at the frame [nq], [nv] (rad, m, /s)
  /// Estimated state: keypoints x [2K] (normalized image coordinates) for the keypoint law;
  /// the model's generalised coordinates q [n] (rad, or its unit for a translation) for the
  /// angle law (angle_control.h; then `coordinates` is true).
  std::vector<double> keypoints;
  /// Its estimated rate: the projected ẋ [2K] (normalized units / s), or q̇ [n] (per s).
  std::vector<double> velocity;
  bool coordinates = false;  ///< keypoints holds generalised coordinates, not image positions
  std::vector<double> action;              ///< applied u [A] (after the limit, actuator units)
  std::vector<double> unclipped;           ///< u before the limit [A]
  std::vector<double> gravity;             ///< the gravity compensation part of unclipped [A]
  std::vector<double> input_acceleration;  ///< ControlAction::input_acceleration [A]
  /// What a reference controller (ClosedLoop::SetReference, e.g. the known model's) computed
  /// for the same frame, not applied: its unclipped u, gravity part and input acceleration [A];
  /// empty without one.
  std::vector<double> reference_unclipped, reference_gravity, reference_input_acceleration;
  double potential = 0;  ///< model's V (model's energy unit)
  double kinetic = 0;    ///< ½ ẋᵀ M ẋ (or ½ M(q) q̇²) with the model's M
};

/// What the loop runs at every step: from the camera frame to the action.
class FrameController {
 public:
  virtual ~FrameController() = default;
  /// Side S of the frames it reads (pixels) and A, its actions' width.
  virtual int image_size() const = 0;
  virtual int action_dim() const = 0;
  /// Estimates the state from `frame` uint8 [S, S, 3] (its rate from the previous frame, `dt`
  /// seconds earlier; 0 at the first step) and computes the action: fills `step`'s keypoints,
  /// velocity, action, unclipped, gravity, input_acceleration, potential and kinetic.
  virtual void Act(std::span<const uint8_t> frame, double dt, ControlStep& step) = 0;
  /// Forgets the previous estimate (the next step's rate estimate is 0).
  virtual void ResetVelocityEstimate() = 0;
};

/// KeyCLD's law (controller.h): keypoints x from the frame, ẋ = P(x − x_prev)/Δt, u from the
/// EnergyShapingController. Both references must outlive it.
class KeypointFrameController : public FrameController {
 public:
  KeypointFrameController(ControlModel& model, EnergyShapingController& controller);
  int image_size() const override { return model_.image_size(); }
  int action_dim() const override { return model_.action_dim(); }
  void Act(std::span<const uint8_t> frame, double dt, ControlStep& step) override;
  void ResetVelocityEstimate() override { previous_ = torch::Tensor(); }

 private:
  ControlModel& model_;
  EnergyShapingController& controller_;
  torch::Tensor previous_;  // previous estimate [1, 2K], undefined before the first step
  torch::Tensor mass_;      // [1, 2K]
};

/// Lag-caVAE's law (angle_control.h): q from the frame, q̇ = (q − q_prev)/Δt (an angle's
/// difference wrapped to (−π, π]), u from the AngleEnergyShapingController. Both references must
/// outlive it.
class AngleFrameController : public FrameController {
 public:
  AngleFrameController(AngleControlModel& model, AngleEnergyShapingController& controller);
  int image_size() const override { return model_.image_size(); }
  int action_dim() const override { return model_.action_dim(); }
  void Act(std::span<const uint8_t> frame, double dt, ControlStep& step) override;
  void ResetVelocityEstimate() override { previous_.reset(); }

 private:
  AngleControlModel& model_;
  AngleEnergyShapingController& controller_;
  std::optional<std::vector<double>> previous_;
};

/// Render → estimate → control → step, one call per control step (Δt = env.timestep()).
class ClosedLoop {
 public:
  /// All references must outlive the loop; `renderer` renders `env` at the controller's
  /// image_size() and its action width is env.nu() (InputError otherwise).
  ClosedLoop(Environment& env, OffscreenRenderer& renderer, FrameController& controller);
  /// The keypoint law: a KeypointFrameController of `model` and `controller`, owned by the loop.
  ClosedLoop(Environment& env, OffscreenRenderer& renderer, ControlModel& model,
             EnergyShapingController& controller);

  /// One control step: renders the current state, lets the controller estimate the state from
  /// the frame and compute u, env.SetAction(u), env.Step(). Returns what it saw and did (the
  /// true state is the one of the frame).
  ControlStep Step();
  /// The frame the last Step() rendered: uint8 [S, S, 3].
  const std::vector<uint8_t>& frame() const { return frame_; }
  /// Forgets the previous estimate (the next step's velocity estimate is 0).
  void ResetVelocityEstimate();
  /// Runs `reference` on every frame too, after the controller, and records its unclipped
  /// action and gravity part in each step (ControlStep::reference_*) without applying them: the
  /// known model's controller beside a learned one says which of the learned terms is wrong
  /// (control/diagnosis.h). It must read frames of the same size and have the same action
  /// width (InputError) and outlive the loop; nullptr removes it.
  void SetReference(FrameController* reference);

 private:
  void CheckSizes();
  std::unique_ptr<FrameController> owned_;  // set by the keypoint constructor
  Environment& env_;
  OffscreenRenderer& renderer_;
  FrameController& controller_;
  FrameController* reference_ = nullptr;
  std::vector<uint8_t> frame_;
};

/// A target for the controller: its keypoints x* and the image they came from.
struct ControlTarget {
  torch::Tensor keypoints;                  ///< x* [1, 2K] float64
  std::vector<uint8_t> image;               ///< uint8 [S, S, 3]
  std::optional<std::vector<double>> qpos;  ///< the true target state, when known
};

/// Renders `env` at joint positions `qpos` (velocities 0) and estimates x* from the frame.
/// Leaves `env` at that state (reset it to the initial state afterwards).
ControlTarget TargetFromState(Environment& env, OffscreenRenderer& renderer, ControlModel& model,
                              const std::vector<double>& qpos);
/// Reads a PNG of the model's image size (RGB) and estimates x*. Throws IoError (missing or
/// unreadable), FormatError (not a PNG / other channel count) or InputError (other size).
ControlTarget TargetFromImage(ControlModel& model, const std::filesystem::path& png);

/// The same for the angle law: keypoints holds the model's q* [1, n].
ControlTarget TargetFromState(Environment& env, OffscreenRenderer& renderer,
                              AngleControlModel& model, const std::vector<double>& qpos);
ControlTarget TargetFromImage(AngleControlModel& model, const std::filesystem::path& png);

/// Joint errors q − q* [nq]: hinge angles wrapped to (−π, π] (rad), slide positions as they are
/// (m). Throws InputError on a size mismatch.
std::vector<double> JointErrors(const Environment& env, const std::vector<double>& qpos,
                                const std::vector<double>& target);
/// Per-joint tolerances [nq]: `angle` for hinges (rad), `position` for slides (m).
std::vector<double> JointTolerances(const Environment& env, double angle, double position);

/// Success from the simulator's true state (docs/method.md §10: reach and hold the target).
struct ControlVerdict {
  /// Every |error| ≤ tolerance and every joint speed |q̇| ≤ speed_tolerance during the last
  /// hold_seconds. The speed bound rejects a system that spins through the target between
  /// frames (a loop that sees the target at every sample while turning 2π·k per step).
  bool success = false;
  double hold_seconds = 1.0;
  std::vector<double> tolerances;       ///< [nq]
  std::vector<double> final_errors;     ///< q − q* at the last frame [nq] (wrapped)
  std::vector<double> max_hold_errors;  ///< max |q − q*| over the last hold_seconds [nq]
  double speed_tolerance = 1.0;         ///< rad/s or m/s, for every joint
  double max_hold_speed = 0;            ///< max |q̇| over joints and the last hold_seconds
  /// Time (s from the first frame) from which every |error| and |q̇| stays within tolerance to the
  /// end; NaN when the last frame is outside.
  double settle_time = std::numeric_limits<double>::quiet_NaN();
};
/// Judges a recorded loop against the true target state. Throws InputError for no steps or a
/// target of the wrong size, tolerances ≤ 0 or hold_seconds < 0.
ControlVerdict JudgeControl(const Environment& env, const std::vector<ControlStep>& steps,
                            const std::vector<double>& target_qpos, double angle_tolerance,
                            double position_tolerance, double hold_seconds = 1.0,
                            double speed_tolerance = 1.0);

/// The default initial state: hanging down, 0.1 rad off (exactly down with an upright target
/// makes x − x* radial, and B⁺ gives no torque): pendulum θ = π − 0.1; cartpole (0, π − 0.1);
/// acrobot (π − 0.1, 0).
std::vector<double> DefaultInitialState(EnvName env);

/// Parses "v1,v2,…" into exactly env.nq() finite numbers; `what` names the option in errors
/// (InputError).
std::vector<double> ParseJointState(const Environment& env, const std::string& text,
                                    const std::string& what);

}  // namespace keycld
