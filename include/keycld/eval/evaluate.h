// Evaluation of a trained run (docs/method.md §8): valid prediction time on every validation
// run, the per-frame error, the estimator's constraint residuals over the state grid, the
// learned masses and energy, the diagnostics of eval/diagnostics.h (learned against true
// accelerations, keypoints against the true state, keypoint-space rollout error), and the
// pictures of docs/evaluation.md, written to RUN_DIR/report/.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "keycld/data/dataset.h"
#include "keycld/dynamics/integrators.h"
#include "keycld/eval/diagnostics.h"
#include "keycld/train/vpt.h"

namespace keycld {

struct EvaluateOptions {
  std::filesystem::path run_dir;     // a training run folder (config.toml, checkpoints/)
  std::filesystem::path checkpoint;  // empty = run_dir/checkpoints/last.pt
  std::filesystem::path data;        // empty = the data set named by the run's config
  std::filesystem::path out_dir;     // empty = run_dir/report
  IntegratorMethod method = IntegratorMethod::kDopri5;  // §8: Dormand–Prince
  int energy_frames = 500;       // length of the unactuated rollout for the energy plot
  int threads = 0;               // LibTorch intra-op threads (0 = all cores)
  std::string device;            // empty = the run's config; cpu | cuda | cuda:N
  bool plots = true;             // write the PNG figures
  StartEstimate start_estimate;  // how the start is read (train/vpt.h); default the paper's
};

/// What `keycld evaluate` measured. Written as evaluation.json and evaluation.md.
struct EvaluationReport {
  std::string env, control, model, solver;
  std::filesystem::path run_dir, checkpoint, data;
  int64_t train_steps = 0;
  double epsilon = 0;                        // VPT threshold of the data set
  VptResult vpt;                             // over all validation runs (vpt.mse: [R, N])
  /// A floor for any model: the VPT of drawing the data set's mean frame for every frame of the
  /// same validation runs (docs/evaluation.md).
  VptResult mean_frame_vpt;
  /// What predicting no motion scores: the VPT of holding each validation run's start frame
  /// (frame 1, where the prediction starts) for every frame (docs/evaluation.md).
  VptResult still_frame_vpt;
  std::vector<int64_t> validation_runs;      // data-set run indices, in the order of vpt.vpt
  std::vector<double> mse_mean, mse_median;  // per frame, over the validation runs
  std::vector<double> masses;  // m_k (M = diag(m₁², m₁², …)), one per keypoint
  // Estimated keypoints of the state-grid images under the environment's constraints (§4).
  double constraint_rms = 0, constraint_max = 0;  // |Φ|, normalized image units
  // The keypoint order check of training (train/relabel.h) on the same estimates: Σ_c Var Φ_c of
  // the model's order and of the best of all K! orders (NaN where there is no check: K = 1,
  // K > 6, no constraints, a baseline), and that order (new keypoint k = old best_order[k]).
  double constraint_spread = 0, best_constraint_spread = 0;
  std::vector<int64_t> best_keypoint_order;
  // Learned potential over the grid against the simulator's potential energy: R² of the best
  // affine fit V_learned ≈ a·V_true + b (1 = same shape), and the fitted scale a.
  double potential_r2 = 0, potential_scale = 0;
  bool has_energy = true;  // false for models without V and M (NODE2)
  // False for a data set imported from video: no state grid (the residuals are taken on the
  // validation runs' first frames), no simulator potential, no acceleration check.
  bool has_simulator = true;
  // False for the VAE baselines (ModelImpl::StatesAreImageKeypoints): their states are
  // generalised coordinates, so no constraint residual and no acceleration check.
  bool image_keypoints = true;
  // Total learned energy along an unactuated rollout of energy_frames frames from validation
  // run 0: (max − min) / (max − min of V over the state grid).
  double energy_relative_variation = 0;
  DynamicsDiagnostics dynamics;         // learned vs true accelerations, keypoints vs state
  RolloutDiagnostics rollouts;          // keypoint-space error of the VPT rollouts
  double integrator_warmup_epochs = 0;  // the run's training integrator schedule
  std::string train_integrator;
  double seconds = 0;
  std::vector<std::filesystem::path> files;  // everything written, in out_dir
};

/// A floor for any model (docs/evaluation.md): the VPT of drawing the data set's mean frame
/// (/mean_image) for every frame of each validation run, with the data set's ε. Reads the
/// validation runs' images one at a time.
VptResult MeanFrameVpt(const Dataset& data);

/// What a model that predicts no motion scores (docs/evaluation.md): the VPT of drawing each
/// validation run's frame 1 (the frame the prediction starts from, method §8) for every frame of
/// that run, with the data set's ε. Throws InputError for runs of fewer than 2 frames.
VptResult StillFrameVpt(const Dataset& data);

/// Loads the run's model and data set, checks that they fit (environment, image size, frame
/// interval), evaluates and writes the report. Throws InputError (bad options, a data set that
/// does not fit the model), IoError / FormatError (missing or corrupt run folder, checkpoint or
/// data set), NumericalError (a rollout diverged beyond the step budget).
EvaluationReport Evaluate(const EvaluateOptions& options);

/// The short table printed by `keycld evaluate`.
std::string FormatEvaluationSummary(const EvaluationReport& report);

/// One row of `keycld evaluate --all-checkpoints`.
struct CheckpointRow {
  std::filesystem::path checkpoint;
  int64_t epoch = 0, step = 0;
  VptResult vpt;  // over every validation run (Dormand–Prince unless asked)
  DynamicsDiagnostics dynamics;
  RolloutDiagnostics rollouts;
};

/// Evaluates every RUN/checkpoints/epoch-NNNN.pt (VPT on all validation runs, the dynamics and
/// rollout diagnostics; no energy rollout or per-run figures) and writes checkpoints.json,
/// checkpoints.md and checkpoints.png (VPT and acceleration scale against the epoch) to the
/// output folder. Same options and errors as Evaluate; IoError if there is no epoch checkpoint.
std::vector<CheckpointRow> EvaluateCheckpoints(const EvaluateOptions& options);

/// Moving average with a centred window of `window` samples (shrunk at the ends).
std::vector<double> MovingAverage(const std::vector<double>& values, int window);

}  // namespace keycld
