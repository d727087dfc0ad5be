// Long-term video prediction of one validation run (docs/method.md §8), as a GIF, a CSV and an MSE
// plot: `keycld predict` and the report of `keycld run`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "keycld/data/dataset.h"
#include "keycld/sim/gl_context.h"
#include "keycld/train/vpt.h"

namespace keycld {

struct PredictOptions {
  std::filesystem::path run_dir;     // training run folder (config.toml, checkpoints/last.pt)
  std::filesystem::path checkpoint;  // a checkpoint file; empty = run_dir/checkpoints/last.pt
  std::filesystem::path data;        // data set; empty = the one run_dir/config.toml names
  int run = 0;                       // index among the data set's validation runs (0-based)
  int frames = 500;                  // F ≥ 3 frames to predict (frame 0 is the estimate)
  std::filesystem::path out_dir;     // empty = run_dir/report
  int scale = 4;                     // GIF pixels per image pixel, [1, 16]
  int threads = 0;                   // LibTorch intra-op threads (0 = every core)
  std::string device = "cpu";        // cpu | cuda | cuda:N
  GlBackend gl = GlBackend::kAuto;   // for re-simulating frames beyond the stored ones
  bool progress = true;              // progress bar on a terminal (stderr)
  StartEstimate start_estimate;      // how the start is read (train/vpt.h); default the paper's
};

struct PredictionOutput {
  std::filesystem::path gif, csv, mse_plot;
  std::string model;         // the checkpoint's model (DescribeModel): variant, env, sizes
  int dataset_run = 0;       // the run's index in the data set
  int frames = 0;            // F
  int stored_frames = 0;     // ground-truth frames read from the data set (min(F, N))
  int simulated_frames = 0;  // ground-truth frames re-simulated beyond them (F − N when F > N)
  /// True when F was cut to the N recorded frames: a data set imported from video has no
  /// simulator to continue the ground truth.
  bool limited_to_recording = false;
  double dt = 0;       // frame interval (s)
  double epsilon = 0;  // VPT threshold: the data set's vpt_epsilon
  int vpt = 0;         // first frame whose MSE exceeds ε (F − 1 if none), docs/method.md §8
  std::vector<double> mse;  // [F] per-pixel MSE of each predicted frame (images in [0, 1])
  int64_t accepted_steps = 0, rejected_steps = 0;  // Dormand–Prince
  double seconds = 0;                              // wall time
};

/// Ground truth of data-set run `run` beyond its stored frames (docs/method.md §7, docs/data.md):
/// an Environment reset to the stored qpos / qvel of frame `from_frame`, the run's constant
/// action, then `count` × (Step, render): the frames from_frame + 1 … from_frame + count.
/// Returns uint8 [count, H, W, 3] (row 0 = top). Throws InputError for a bad run or frame
/// index or count < 0, GlError when no OpenGL backend works.
std::vector<uint8_t> ResimulateFrames(const Dataset& data, int run, int from_frame, int count,
                                      GlBackend gl = GlBackend::kAuto);

/// Predicts F frames of validation run `options.run` from its first three frames and writes,
/// into out_dir:
///  - predict-run<INDEX>.gif: per frame, panels side by side (each `scale`× the image, 2·scale
///    pixels apart): ground truth | estimated heatmaps (KeypointColor per keypoint) with the
///    estimated keypoints as white crosses | predicted frame with the predicted keypoints as
///    discs | |truth − prediction|; under them a timeline, green for frames whose MSE ≤ ε and
///    red for the others, filled up to the current frame. max(2, round(100·Δt)) cs per frame.
///  - predict-run<INDEX>.csv: frame, time_s (the data set's time: (frame + 1)·Δt), per
///    keypoint k pred_x<k>, pred_y<k>, then est_x<k>, est_y<k> (normalized image coordinates,
///    docs/method.md §2; the estimate is the estimator's reading of the ground-truth frame), mse,
///    valid (1 when mse ≤ ε).
///  - predict-run<INDEX>-mse.png: MSE per frame on a log axis, ε dashed, the VPT marked.
/// Prediction (docs/method.md §8): PredictKeypoints with Dormand–Prince and the run config's
/// [eval] rtol / atol, rendered with the model's renderer. Ground truth: the stored N frames,
/// then ResimulateFrames from frame N − 1 when F > N.
/// Throws InputError (no checkpoint in the run folder, no data set named, a data set of
/// another environment, image size, action dimension or Δt, run index out of range, F < 3,
/// scale outside [1, 16]), FormatError / IoError for bad or missing files, NumericalError if
/// the rollout diverges, Interrupted on Ctrl-C. Each file is written atomically (never half
/// written).
PredictionOutput WritePrediction(const PredictOptions& options);

}  // namespace keycld
