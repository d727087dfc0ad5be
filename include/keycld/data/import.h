// Data sets from video (`keycld import`) and video from data sets (`keycld export`): a video
// file or a folder of PNG frames becomes a data set of the usual format (dataset.h) with no
// simulator state, so that train, evaluate and predict work on recordings of a real system
// (docs/import.md).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "keycld/data/dataset.h"

namespace keycld {

struct ImportOptions {
  /// Video files (anything FFmpeg decodes) or folders of PNG frames, in order; each is cut into
  /// consecutive runs of `frames` frames and its remainder is dropped.
  std::vector<std::filesystem::path> inputs;
  /// The system seen: a built-in name ("pendulum") or a description file (sim/system.h). Its
  /// keypoints and constraints define the model; lengths it leaves out are measured through
  /// its MJCF model and camera as generate does.
  std::string system;
  std::filesystem::path out;  // the .h5 file to write
  int size = 64;              // output frames are size × size pixels, [8, 1024]
  int frames = 50;            // frames per run, ≥ 3
  int stride = 1;             // keep every stride-th frame of each input
  int skip = 0;               // frames dropped at the start of each input
  /// The square cut from every frame (source pixels: left, top, side); absent: the largest
  /// centred square.
  std::optional<std::array<int, 3>> crop;
  /// CSV of actions, nu numbers per row (a header row is allowed): one row per input frame (all
  /// inputs, before skip and stride) or one row per run. The method takes one constant action per
  /// run (docs/method.md §7): rows that vary within a run are refused.
  std::filesystem::path actions;
  std::optional<ControlMode> control;  // default: none without actions, full with them
  /// Seconds between kept frames; absent: stride / the video's frame rate (a folder of PNG
  /// frames states none, so it needs dt).
  std::optional<double> dt;
  bool force = false;  // replace an existing `out`
  bool progress = true;
};

struct ImportResult {
  std::filesystem::path path;
  DatasetInfo info;
  int64_t frames_read = 0;     // decoded, over all inputs
  int64_t frames_dropped = 0;  // skipped, strided out, or past the last whole run
  double seconds = 0;
};

/// Decodes, crops and scales the inputs and writes the data set atomically (nothing is left on
/// an error or an interruption). ε (vpt_epsilon) is computed from the imported frames as for a
/// generated data set (§8); the last 10 % of the runs validate. Throws InputError (bad options,
/// fewer than 2 runs, a crop outside the frame, actions that do not fit), IoError (a missing
/// input, an unwritable output), FormatError (an input that cannot be decoded, frames of
/// different sizes, a malformed CSV), Interrupted.
ImportResult ImportDataset(const ImportOptions& options);

struct ExportOptions {
  std::filesystem::path data;  // the data set
  /// A video file (.mp4, .mkv: H.264) or, when it has no extension, a folder of PNG frames
  /// frame_000000.png, … (created; it must not exist).
  std::filesystem::path out;
  std::string runs = "all";       // "all", "train", "validation", or run indices "0,5,7"
  int scale = 1;                  // each pixel becomes scale × scale (nearest), [1, 64]
  int crf = 18;                   // H.264 constant rate factor, [0, 51]
  std::filesystem::path actions;  // if set, a CSV of the actions, one row per frame
  bool force = false;             // replace an existing video or CSV (never a folder)
};

struct ExportResult {
  int64_t frames = 0;
  int runs = 0;
  double fps = 0;
};

/// Writes the chosen runs' frames one after another at 1 / dt frames per second. Throws
/// InputError, IoError, FormatError.
ExportResult ExportDataset(const ExportOptions& options);

}  // namespace keycld
