// Diagnostics that say whether learned dynamics are right, independently of the pixels
// (docs/evaluation.md, "Diagnostics"):
//   - the learned acceleration against the simulator's at the states of the state grid, both in
//     keypoint units (acceleration_scale: 1 is right; Euler training drives it towards ≈1.38,
//     docs/method.md §5);
//   - how well the estimated keypoints follow the true configuration (angle of each link, link
//     lengths);
//   - the keypoint-space error of a rollout next to its pixel error, and the VPT the estimator
//     and renderer would allow with perfect dynamics, so a failing run says which part failed.
//
// Generalised coordinates from keypoints. Each joint of the simulator (a qpos entry) is read off
// the estimated keypoints: a hinge as the image-plane angle of the link from its start (a fixed
// pivot, or the parent keypoint) to its keypoint, atan2(Δx, Δy) (0 = straight up, positive
// towards +x, as the joints of assets/envs/), minus the parent link's angle for a chained hinge;
// a slide as the keypoint's x divided by the camera scale (metres). With zero velocity the
// chain rule q̈ = (∂q/∂x) ẍ holds exactly (no velocity terms), which is how learned keypoint
// accelerations are compared with MuJoCo's joint accelerations.
#pragma once

#include <torch/torch.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "keycld/data/dataset.h"
#include "keycld/models/registry.h"
#include "keycld/sim/environment.h"
#include "keycld/train/vpt.h"

namespace keycld {

/// How one joint coordinate (qpos entry) is read off the keypoints.
struct CoordinateSpec {
  enum class Kind { kAngle, kSlide };
  Kind kind = Kind::kAngle;
  std::string name;                   // e.g. "pole angle"
  int qpos = 0;                       // index into qpos, qvel and qacc
  int keypoint = 0;                   // the keypoint at the link's end (kAngle) or on the slide
  int parent = -1;                    // kAngle: the keypoint the link starts at; −1 = `pivot`
  std::array<double, 2> pivot{0, 0};  // kAngle with parent −1: fixed start (normalized units)
  int relative_to = -1;               // kAngle: coordinate whose angle is subtracted; −1 = none
  double scale = 1;                   // kSlide: normalized image units per metre along x
};

/// The coordinate map of a built-in system for images of `image_size` pixels, from its MJCF
/// model and camera (pivots and scale from Environment::ProjectToImage): pendulum: pole angle
/// about the pivot; cartpole: cart position (slide of keypoint 1), pole angle from keypoint 1 to
/// keypoint 2; acrobot: shoulder angle about the pivot, elbow angle from keypoint 1 to 2 relative
/// to the shoulder angle.
std::vector<CoordinateSpec> CoordinateSpecs(const Environment& env, int image_size);

/// Joint coordinates q [B, nq] (radians; metres for slides) read off keypoint states x [B, 2K]
/// (normalized image coordinates), differentiable. Angles are in (−π, π] before a relative angle
/// is subtracted (then wrapped again). Throws InputError for bad shapes or keypoint indices.
torch::Tensor KeypointCoordinates(const std::vector<CoordinateSpec>& specs, const torch::Tensor& x,
                                  int nq);

/// A fit y ≈ scale·x through the origin over paired samples, with R² = 1 − SS_res / SS_tot.
struct ScaleFit {
  double scale = 0, r2 = 0;
  int64_t samples = 0;
};
ScaleFit FitScale(const std::vector<double>& x, const std::vector<double>& y);

struct CoordinateDiagnostics {
  std::string name, unit;  // unit of the errors: "deg" or "m"
  ScaleFit acceleration;   // learned vs true q̈ (zero velocity and action) on this coordinate
  double lever = 0;        // normalized units per unit of q: link length (angles), scale (slides)
  double error_rms = 0;    // RMS of (estimated − true) coordinate over the grid
  double error_mean = 0;   // mean of the same (a constant offset)
  double error_max = 0;
  double link_length_mean = 0, link_length_std = 0;  // angles: |keypoint − start| (normalized)
  /// The paired samples of `acceleration` (keypoint units, one per grid state): the
  /// simulator's and the learned q̈ times the lever, at zero velocity and action.
  std::vector<double> true_acceleration, learned_acceleration;
};

struct DynamicsDiagnostics {
  /// Learned vs true accelerations at the grid states with zero velocity and zero action, every
  /// coordinate in keypoint units (q̈ times its lever), fitted through the origin: 1 is right.
  ScaleFit acceleration;
  /// Per actuator (actuated data sets only): the learned vs true change of the acceleration
  /// when actuator a goes from 0 to 1 (input matrix check), in keypoint units.
  std::vector<ScaleFit> input;
  std::vector<CoordinateDiagnostics> coordinates;
};

/// A keypoint-space dynamics ẍ = g(x, ẋ, u): x, ẋ [B, 2K], u [A] → [B, 2K].
using KeypointAcceleration = std::function<torch::Tensor(
    const torch::Tensor& x, const torch::Tensor& xdot, const torch::Tensor& u)>;

/// Compares a dynamics with the simulator at the grid states: grid_x [G, 2K] are the estimated
/// keypoints of the grid images (of `image_size` pixels), grid_qpos the G × nq true joint
/// positions (row-major). `actuated`: also fit the input (one actuator at a time at u = 1).
/// Throws InputError for mismatched sizes.
DynamicsDiagnostics DiagnoseDynamics(const KeypointAcceleration& acceleration, int image_size,
                                     int action_dim, Environment& env, const torch::Tensor& grid_x,
                                     const std::vector<double>& grid_qpos, bool actuated);
/// The same for a trained model (every variant: it only calls Acceleration).
DynamicsDiagnostics DiagnoseDynamics(Model& model, Environment& env, const torch::Tensor& grid_x,
                                     const std::vector<double>& grid_qpos, bool actuated);

/// The estimated keypoints of a data set's state grid: x [G, 2K] (the model's device) of its
/// /grid images and the G × nq true joint positions (row-major). Throws FormatError when the data
/// set has no grid (one imported from video, DatasetInfo::has_state() false).
struct StateGridEstimates {
  int count = 0;
  std::vector<double> qpos;
  torch::Tensor x;
};
StateGridEstimates EncodeStateGrid(Model& model, const Dataset& data);

/// DiagnoseDynamics on a data set's state grid (the checks of `keycld evaluate` that
/// `keycld benchmark` reports per cell). Throws FormatError without a state grid and InputError
/// for a custom system (its map from keypoints to joints is not known).
DynamicsDiagnostics DiagnoseOnStateGrid(Model& model, const Dataset& data);

struct RolloutDiagnostics {
  /// Per frame, mean over runs: ‖predicted − estimated keypoint‖ averaged over keypoints
  /// (normalized units).
  std::vector<double> keypoint_error_mean;
  /// Per frame, mean over runs: MSE of the frame rendered from its own estimated keypoints.
  std::vector<double> reconstruction_mse_mean;
  /// The VPT the estimator and renderer allow: first frame whose reconstruction MSE exceeds ε.
  VptResult reconstruction_vpt;
  /// Of the runs whose prediction fails before the last frame: failures where the frame cannot
  /// be drawn from its own estimate either (renderer / estimator), and the others (dynamics).
  int failed_runs = 0, failures_rendering = 0, failures_dynamics = 0;
  /// Keypoint error at the first invalid frame, mean over the failed runs (normalized units).
  double keypoint_error_at_failure = 0;
};

/// Keypoint-space view of a VPT evaluation: images uint8 [R, N, H, W, 3] of the validation runs
/// and the VPT result computed on them (its predicted keypoints and per-run VPT).
RolloutDiagnostics DiagnoseRollouts(Model& model, const torch::Tensor& images, const VptResult& vpt,
                                    double epsilon);

}  // namespace keycld
