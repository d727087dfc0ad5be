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

/// One MuJoCo simulation of a benchmark system. Joint angles are in radians with 0 = pointing
/// straight up; positions in metres; time in seconds. Not thread-safe; copy it per thread.
class Environment {
 public:
  /// Loads `<assets_dir>/<name>.xml`. Throws IoError when the MJCF is missing and
  /// FormatError when MuJoCo rejects it (the message carries MuJoCo's error).
  explicit Environment(EnvName name, const std::filesystem::path& assets_dir = DefaultAssetsDir());
  Environment(const Environment& other);
  Environment& operator=(const Environment&) = delete;
  ~Environment();

  EnvName name() const { return name_; }
  int nq() const { return model_->nq; }
  int nv() const { return model_->nv; }
  int nu() const { return model_->nu; }
  /// Physics time step = frame interval Δt of the data sets (s).
  double timestep() const { return model_->opt.timestep; }

  /// Sets qpos [nq] and qvel [nv], time 0, action 0, and runs mj_forward.
  /// Throws InputError on a size mismatch.
  void Reset(std::span<const double> qpos, std::span<const double> qvel);
  /// Draws the initial state of docs/method.md §7 from `rng` and calls Reset.
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

  mjModel* model() { return model_; }
  const mjModel* model() const { return model_; }
  mjData* data() { return data_; }
  const mjData* data() const { return data_; }

 private:
  EnvName name_;
  mjModel* model_ = nullptr;
  mjData* data_ = nullptr;
  std::vector<int> keypoint_sites_;
  int camera_ = -1;
};

/// The state grid of docs/method.md §7 for plots: qpos rows (pendulum 16 angles over [−π, π);
/// cartpole 16×16 over cart [−1, 1) × angle [−π, π); acrobot 16×16 over both angles).
std::vector<std::vector<double>> StateGrid(EnvName env);

/// The constant action of one run (docs/method.md §7): zeros for "none"; otherwise each actuator
/// U[−2, 2], 20 % of runs all zero, and for "under" the second actuator zero.
std::vector<double> SampleAction(EnvName env, ControlMode mode, int nu, Rng& rng);

}  // namespace keycld
