// KeyCLD data sets on disk (HDF5), docs/method.md §7. Layout (format version 1):
//   /images      uint8   [runs, frames, H, W, 3]  RGB, row 0 = top
//   /time        float64 [runs, frames]           s, time of each frame (frame 0 after 1 step)
//   /action      float64 [runs, frames, nu]       constant within a run
//   /qpos        float64 [runs, frames, nq]       rad (angles, 0 = up) or m (cart)
//   /qvel        float64 [runs, frames, nv]
//   /mean_image  float32 [H, W, 3]                in [0, 1], mean over runs of time averages
//   /split/train, /split/validation  int64 run indices (validation = the last runs)
//   /grid/qpos   float64 [G, nq], /grid/images uint8 [G, H, W, 3]  state grid for plots
// Root attributes: format ("keycld-dataset"), format_version, env ("custom" for a system of the
// user's own), system (its name), system_description (the resolved description file, TOML;
// absent in files written before descriptions existed), control, runs, frames,
// size, seed, dt, vpt_epsilon, train_runs, validation_runs, mujoco_version, keycld_version,
// gl_backend, gl_renderer; data sets imported from video (data/import.h) add source ("import")
// and source_files, and have no /qpos, /qvel or /grid.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "keycld/sim/environment.h"

namespace keycld {

inline constexpr int kDatasetFormatVersion = 1;
inline constexpr const char* kDatasetFormatName = "keycld-dataset";

/// The generation parameters and summary numbers of a data set.
struct DatasetInfo {
  EnvName env = EnvName::kPendulum;  // kCustom for a description file's system
  std::string system = "pendulum";   // the system's name
  std::string system_description;    // resolved TOML (sim/system.h); "" in older files
  ControlMode control = ControlMode::kNone;
  int runs = 0, frames = 0, size = 0;
  uint64_t seed = 0;
  int nq = 0, nv = 0, nu = 0;
  double dt = 0;           // s, frame interval = physics time step
  double vpt_epsilon = 0;  // docs/method.md §8 threshold, per-pixel MSE on [0, 1] images
  int train_runs = 0, validation_runs = 0;
  int format_version = 0;
  std::string mujoco_version, keycld_version, gl_backend, gl_renderer;
  std::string source = "simulation";  // "import": frames from a video or PNG folder
  std::string source_files;           // import: the input files, one per line

  /// Whether the file holds the simulator's state (qpos, qvel, state grid): simulated data
  /// sets do, imported ones do not.
  bool has_state() const { return source == "simulation"; }
};

/// The message for what needs the simulator's state on a data set imported from video:
/// "<what> needs a simulator: '<file>' was imported from <inputs> and has no joint states".
std::string NeedsSimulatorMessage(const std::string& what, const std::string& file,
                                  const DatasetInfo& info);

/// The system of a data set: its stored description, or the built-in one for files written
/// before descriptions were stored. Throws FormatError/InputError for a bad description.
SystemDescription DatasetSystem(const DatasetInfo& info);

/// Number of validation runs for `runs` runs: the last 10 % (50 of the paper's 500), at
/// least 1 when runs ≥ 2, 0 for a single run.
int ValidationRunCount(int runs);

/// Read access to a data set file. Opening validates the format, version, every dataset's
/// shape and dtype, and throws FormatError naming the file and the offending field
/// (IoError if the file is missing or unreadable).
class Dataset {
 public:
  static Dataset Open(const std::filesystem::path& path);
  Dataset(Dataset&&) noexcept;
  Dataset& operator=(Dataset&&) noexcept;
  ~Dataset();

  const DatasetInfo& info() const { return info_; }
  const std::filesystem::path& path() const { return path_; }

  /// Frames of one run: uint8 [frames, H, W, 3]. Throws InputError for a bad index.
  std::vector<uint8_t> ReadImages(int run) const;
  /// Ground truth of one run: [frames], [frames, nu], [frames, nq], [frames, nv]. ReadQpos and
  /// ReadQvel throw InputError (NeedsSimulatorMessage) on an imported data set.
  std::vector<double> ReadTime(int run) const;
  std::vector<double> ReadAction(int run) const;
  std::vector<double> ReadQpos(int run) const;
  std::vector<double> ReadQvel(int run) const;
  /// [H, W, 3] float in [0, 1].
  std::vector<float> ReadMeanImage() const;
  std::vector<int64_t> TrainRuns() const;
  std::vector<int64_t> ValidationRuns() const;
  /// State grid: qpos [G, nq] and images [G, H, W, 3]; G returned in `count`. InputError on an
  /// imported data set.
  std::vector<double> ReadGridQpos(int* count) const;
  std::vector<uint8_t> ReadGridImages() const;

 private:
  Dataset() = default;
  struct Handle;
  std::unique_ptr<Handle> h_;
  std::filesystem::path path_;
  DatasetInfo info_;
};

}  // namespace keycld
