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
#include <optional>
#include <string>
#include <vector>

#include "keycld/control/control_model.h"
#include "keycld/control/controller.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/offscreen_renderer.h"

namespace keycld {

/// One step of the closed loop.
struct ControlStep {
  double time = 0;                 ///< s, simulator time of the frame (before this step)
  std::vector<double> qpos, qvel;  ///< true joint state at the frame [nq], [nv] (rad, m, /s)
  std::vector<double> keypoints;   ///< estimated x [2K] (normalized image coordinates)
  std::vector<double> velocity;    ///< estimated, projected ẋ [2K] (normalized units / s)
  std::vector<double> action;      ///< applied u [A] (after the limit, actuator units)
  std::vector<double> unclipped;   ///< u before the limit [A]
  double potential = 0;            ///< model's V(x) (model's energy unit)
  double kinetic = 0;              ///< ½ ẋᵀ M ẋ with the model's M
};

/// Render → estimate → control → step, one call per control step (Δt = env.timestep()).
class ClosedLoop {
 public:
  /// All references must outlive the loop; `renderer` renders `env` at model.image_size()
  /// (InputError otherwise).
  ClosedLoop(Environment& env, OffscreenRenderer& renderer, ControlModel& model,
             EnergyShapingController& controller);

  /// One control step: renders the current state, estimates x from the frame, ẋ =
  /// P(x − x_prev)/Δt (0 at the first step), u from the controller, env.SetAction(u),
  /// env.Step(). Returns what it saw and did (the true state is the one of the frame).
  ControlStep Step();
  /// The frame the last Step() rendered: uint8 [S, S, 3].
  const std::vector<uint8_t>& frame() const { return frame_; }
  /// Forgets the previous estimate (the next step's velocity estimate is 0).
  void ResetVelocityEstimate() { previous_ = torch::Tensor(); }

 private:
  Environment& env_;
  OffscreenRenderer& renderer_;
  ControlModel& model_;
  EnergyShapingController& controller_;
  std::vector<uint8_t> frame_;
  torch::Tensor previous_;  // previous estimate [1, 2K], undefined before the first step
  torch::Tensor mass_;      // [1, 2K]
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
