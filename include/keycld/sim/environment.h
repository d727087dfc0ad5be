// The benchmark systems of KeyCLD (docs/method.md §7) simulated with MuJoCo.
#pragma once

#include <mujoco/mujoco.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "keycld/sim/env_name.h"
#include "keycld/sim/system.h"

namespace keycld {

/// MuJoCo's version as "major.minor.patch" (e.g. "2.2.2").
std::string MujocoVersion();

/// Directory holding pendulum.xml, cartpole.xml, acrobot.xml and common.xml: the environment
/// variable KEYCLD_ASSETS if set, else the source tree's assets/envs.
std::filesystem::path DefaultAssetsDir();

/// Replaces MuJoCo's error handler (which prints several lines and waits for Enter) by one that
/// prints one line and exits with status 1, after calling `forward(message)` if given.
/// Environment's constructor installs it (without `forward`) on first use.
void InstallMujocoHandlers(void (*forward)(const char*) = nullptr);

/// Random number source of the data protocol: 64-bit Mersenne twister seeded from
/// (seed, stream, index) so that every run has its own reproducible stream.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream, uint64_t index);
  /// Uniform in [lo, hi) from 53 random bits (identical on every platform).
  double Uniform(double lo, double hi);

 private:
  std::mt19937_64 engine_;
};

/// One MuJoCo simulation of a system: a built-in one or one from a description file
/// (sim/system.h). Joint angles are in radians (the built-ins: 0 = pointing straight up);
/// positions in metres; time in seconds. Not thread-safe; copy it per thread.
class Environment {
 public:
  /// The built-in system `name` (assets/systems/<name>.toml), its MJCF from
  /// `<assets_dir>/<name>.xml`. Throws as the constructor below.
  explicit Environment(EnvName name, const std::filesystem::path& assets_dir = DefaultAssetsDir());
  /// Loads the description's MJCF and finds its camera and keypoint sites; a constraint's
  /// point_site becomes its image point (the site must be fixed in the world). Throws IoError
  /// when the MJCF is missing, FormatError when MuJoCo rejects it (the message carries MuJoCo's
  /// error) or a named site or camera is missing, and InputError when the description's joint
  /// and actuator counts disagree with the model's (nq, nv, nu).
  explicit Environment(const SystemDescription& system);
  Environment(const Environment& other);
  Environment& operator=(const Environment&) = delete;
  ~Environment();

  /// The built-in system, or kCustom.
  EnvName name() const { return name_; }
  /// The description, its point sites already resolved to image points.
  const SystemDescription& system() const { return system_; }
  /// The system's name ("pendulum", or a description's name).
  const std::string& system_name() const { return system_.name; }
  int nq() const { return model_->nq; }
  int nv() const { return model_->nv; }
  int nu() const { return model_->nu; }
  /// Physics time step = frame interval Δt of the data sets (s).
  double timestep() const { return model_->opt.timestep; }

  /// Sets qpos [nq] and qvel [nv], time 0, action 0, and runs mj_forward.
  /// Throws InputError on a size mismatch.
  void Reset(std::span<const double> qpos, std::span<const double> qvel);
  /// Draws the initial state from `rng` (every qpos from its range, then every qvel; the
  /// built-ins: docs/method.md §7) and calls Reset.
  void ResetRandom(Rng& rng);
  /// Sets the constant control u [nu] (actuator units; torque = gear · u).
  void SetAction(std::span<const double> u);
  /// Advances one physics step of timestep() seconds; positions of bodies, sites and camera
  /// are then those of the new state.
  void Step();

  std::vector<double> qpos() const;
  std::vector<double> qvel() const;
  std::vector<double> action() const;
  double time() const { return data_->time; }
  /// Kinetic + potential energy (J), MuJoCo's energy computation.
  double TotalEnergy();

  /// World positions (m) of the points the method models as point masses: pendulum bob;
  /// cartpole cart centre and pole tip; acrobot elbow and tip. [K][3].
  std::vector<std::array<double, 3>> KeypointWorldPositions() const;
  /// Those points in the normalized image coordinates of docs/method.md §2 for a `size`×`size`
  /// render of the fixed camera: [K][2], x right, y up, ±1 at the outer pixel centres.
  std::vector<std::array<double, 2>> KeypointImagePositions(int size) const;
  /// Projects a world point (m) to normalized image coordinates as above.
  std::array<double, 2> ProjectToImage(const std::array<double, 3>& world, int size) const;

  /// The description with every constraint length (or line offset, or fixed point) that it
  /// leaves out measured as the mean over 64 initial states drawn from a fixed stream, in the
  /// normalized image coordinates of a `size`×`size` render. The state is left reset.
  SystemDescription ResolveConstraints(int size);
  /// Checks that the resolved description's constraints hold on the model: over 64 initial
  /// states from a fixed stream, each term's constrained quantity (a distance, a coordinate,
  /// n·p) must stay constant within `tolerance` (normalized image coordinates of a
  /// `size`×`size` render). Its stated value need not equal the projection: as in KeyCLD
  /// (docs/method.md §4) the estimator learns to place its points where the constraints hold.
  /// Returns each term's spread (max − min); throws InputError naming the term and the states
  /// otherwise. The state is left reset.
  std::vector<double> CheckConstraints(const SystemDescription& resolved, int size,
                                       double tolerance);

  mjModel* model() { return model_; }
  const mjModel* model() const { return model_; }
  mjData* data() { return data_; }
  const mjData* data() const { return data_; }

 private:
  void Load();

  EnvName name_;
  SystemDescription system_;
  mjModel* model_ = nullptr;
  mjData* data_ = nullptr;
  std::vector<int> keypoint_sites_;
  int camera_ = -1;
};

/// The state grid of docs/method.md §7 for plots: qpos rows (pendulum 16 angles over [−π, π);
/// cartpole 16×16 over cart [−1, 1) × angle [−π, π); acrobot 16×16 over both angles).
std::vector<std::vector<double>> StateGrid(EnvName env);
/// A description's state grid (its [state_grid], last axis fastest); without one, each joint's
/// initial range with n = max(2, ⌊256^(1/nq)⌋) values per axis.
std::vector<std::vector<double>> StateGrid(const SystemDescription& system);

/// The constant action of one run (docs/method.md §7): zeros for "none"; otherwise each actuator
/// U[−2, 2], 20 % of runs all zero, and for "under" the second actuator zero.
std::vector<double> SampleAction(EnvName env, ControlMode mode, int nu, Rng& rng);
/// The same for a description: first the zero-run draw (zero_action_fraction), then one draw
/// per actuator from its range, then the under_zero actuators set to zero.
std::vector<double> SampleAction(const SystemDescription& system, ControlMode mode, Rng& rng);

}  // namespace keycld
