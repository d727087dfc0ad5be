// Data set generation with MuJoCo physics and headless rendering (docs/method.md §7).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "keycld/data/dataset.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/gl_context.h"

namespace keycld {

/// How much a system's constrained quantities (distances, coordinates) may vary over its
/// initial states (Environment::CheckConstraints) for generation to go on: 1 % of the image
/// width, about 0.3 px at 32 px. A planar mechanism in a plane facing the camera shows 1e-15.
inline constexpr double kConstraintTolerance = 0.02;

struct GenerateOptions {
  EnvName env = EnvName::kPendulum;  // a built-in system; ignored when `system` is set
  /// A system of the user's own (`generate --system FILE`, sim/system.h).
  std::optional<SystemDescription> system;
  ControlMode control = ControlMode::kNone;
  int runs = 500;
  int frames = 50;
  int size = 64;
  uint64_t seed = 0;
  int workers = 0;  // worker processes, 0 = one per core
  GlBackend gl = GlBackend::kAuto;
  std::filesystem::path out_dir = "data";
  std::filesystem::path assets_dir = DefaultAssetsDir();
  bool force = false;    // regenerate even if the file exists
  bool progress = true;  // progress bar on a terminal
};

/// Throws InputError for an invalid option (counts ≤ 0, size outside [8, 1024], pendulum
/// with "under", more workers than runs is fine).
void ValidateGenerateOptions(const GenerateOptions& options);

/// The name of the system generated: the description's, or the built-in's.
std::string GenerateSystemName(const GenerateOptions& options);
/// `<out_dir>/<system>-<control>-<size>px-<runs>x<frames>-seed<seed>.h5`.
std::filesystem::path DatasetPath(const GenerateOptions& options);

struct GenerateResult {
  std::filesystem::path path;
  bool reused = false;  // the file existed with identical parameters
  double seconds = 0;   // wall time of the generation
  double frames_per_second = 0;
  DatasetInfo info;
};

/// Generates the data set (or reuses a matching existing file unless `force`), writing it
/// atomically. Runs are distributed over `workers` forked processes, each with its own GL
/// context (Mesa serializes the contexts of one process);
/// every run draws from its own random stream (seed, run), so the file content is the same
/// for any worker count. Throws InputError, IoError, GlError, Interrupted (SIGINT/SIGTERM:
/// nothing is left behind).
GenerateResult GenerateDataset(const GenerateOptions& options);

}  // namespace keycld
