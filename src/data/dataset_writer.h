// The HDF5 file of a data set (format: include/keycld/data/dataset.h) under construction, shared
// by generation (data/generate.h) and import (data/import.h). Internal to src/data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "hdf5.h"
#include "keycld/data/dataset.h"

namespace keycld {

/// Exact per-pixel sums over all frames, for the mean image and the VPT threshold ε
/// (docs/method.md §8). Integer sums are exact, so the result does not depend on the order runs
/// arrive in.
class PixelStatistics {
 public:
  explicit PixelStatistics(size_t pixels) : sum_(pixels, 0), sum_sq_(pixels, 0) {}
  /// Adds `count` frames of sum_.size() bytes each.
  void AddFrames(const uint8_t* frames, int count);
  /// The mean image in [0, 1] (mean over runs of each run's time average = mean over all
  /// frames, every run having the same number of frames).
  std::vector<float> MeanImage() const;
  /// ε = mean over runs of the per-pixel MSE to the mean image, in [0, 1]² units.
  double Epsilon() const;

 private:
  std::vector<uint64_t> sum_, sum_sq_;
  double frames_ = 0;
};

/// What a data set file says about itself (its root attributes, dataset.h).
struct DatasetHeader {
  EnvName env = EnvName::kPendulum;
  std::string system, description;
  ControlMode control = ControlMode::kNone;
  int runs = 0, frames = 0, size = 0;
  uint64_t seed = 0;
  int nq = 0, nv = 0, nu = 0;
  double dt = 0;
  /// Simulated data sets store qpos, qvel and the state grid; imported ones do not.
  bool has_state = true;
  int grid_size = 0;
  std::string source = "simulation";  // or "import"
  std::string source_files;           // import: the inputs, one per line
};

/// Runs (and grid images) arrive in any order; Finish writes the statistics, the split and the
/// attributes and closes every handle. Throws IoError when HDF5 cannot create or write.
class DatasetWriter {
 public:
  /// Creates the file at `path` (the atomic file's temporary); `target` names it in errors.
  DatasetWriter(const std::filesystem::path& path, const std::filesystem::path& target,
                DatasetHeader header);
  /// One run: images uint8 [frames, S, S, 3], time [frames], action [frames, nu], and, when the
  /// header has_state, qpos [frames, nq] and qvel [frames, nv] (ignored otherwise).
  void WriteRun(hsize_t run, const uint8_t* images, const double* time, const double* action,
                const double* qpos, const double* qvel);
  /// One state-grid image [S, S, 3] and its qpos [nq].
  void WriteGridImage(hsize_t index, const uint8_t* image, const double* qpos);
  void Finish(const std::string& gl_backend, const std::string& gl_renderer,
              const std::string& mujoco_version);
  /// ε of the runs written so far (PixelStatistics::Epsilon).
  double epsilon() const { return stats_.Epsilon(); }
  /// The error of a failed write to the data set at `target` (the name it will have).
  [[noreturn]] void Fail() const;

 private:
  void WriteSplit();
  void WriteAttributes(const std::string& gl_backend, const std::string& gl_renderer,
                       const std::string& mujoco_version);

  const std::filesystem::path target_;
  const DatasetHeader h_;
  PixelStatistics stats_;
  h5::Id file_, images_, time_, action_, qpos_, qvel_, grid_, grid_images_, grid_qpos_;
};

}  // namespace keycld
