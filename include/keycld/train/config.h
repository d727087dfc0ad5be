// Training configuration: TOML presets (configs/*.toml) + command-line overrides.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "keycld/dynamics/integrators.h"
#include "keycld/models/registry.h"
#include "keycld/sim/environment.h"

namespace keycld {

/// Every setting of a training run. Defaults are the paper's (docs/method.md §3, §6).
struct TrainConfig {
  // [data]
  std::filesystem::path data;    // HDF5 data set; empty = the file `keycld generate` names
                                 // for the fields below, under data/
  std::string env;               // expected environment ("" = take it from the data set)
  std::string control = "none";  // the data set to generate when `data` is empty
  int size = 64, runs = 500, frames = 50;
  uint64_t data_seed = 0;
  // [model]
  int hidden = 32;               // h
  double sigma = 0.1;            // Gaussian map width, normalized units
  std::string model = "keycld";  // `model = "keycld"`; the old key `dynamics =
                                 // "constrained" | "unconstrained"` is still read
  /// The dynamics networks' first weights (V, B; NODE2's g): "paper", N(0, 0.01²) (KeyCLD §3),
  /// or "fan-in", U(±1/√fan_in) (docs/method.md, Departures).
  std::string dense_init = "paper";
  // [train]
  int epochs = 40;
  int64_t max_steps = 0;  // stop after this many steps in total (0 = no limit)
  /// Sequences (training runs) per optimizer step, over all ranks of a distributed run: the
  /// step's gradient is the mean of theirs. An epoch is ⌊train_runs / batch_sequences⌋ steps (the
  /// remainder of the shuffled order is left out). The paper's: 1.
  int batch_sequences = 1;
  double lr = 3e-4;                      // estimator and renderer
  double dynamics_lr_scale = 0.2;        // dynamics parameters (mass, potential, input matrix;
                                         // NODE2's network): lr · scale
  /// Schedule: the dynamics parameters at lr · `warmup_dynamics_lr_scale` during the first
  /// `dynamics_lr_warmup_epochs` epochs (fractions allowed), then at lr · dynamics_lr_scale.
  double warmup_dynamics_lr_scale = 0.2;
  double dynamics_lr_warmup_epochs = 0;
  double grad_clip = 5.0;                // element-wise clip before Adam
  std::string lr_schedule = "constant";  // constant (the paper) | cosine: both learning rates
                                         // decay as ½(1 + cos(π·step/total)) to lr_final_scale × lr
  double lr_final_scale = 0.0;  // cosine: the final fraction of the learning rates
  double lr_decay_start = 0.0;  // cosine: fraction of the steps before the decay begins
  int horizon = 4;              // P, frame intervals predicted by the dynamics loss
  /// Schedule: P = `warmup_horizon` during the first `horizon_warmup_epochs` epochs (fractions
  /// allowed), then P = horizon.
  int warmup_horizon = 4;
  double horizon_warmup_epochs = 0;
  /// The dynamics loss's integrator: "euler" (the paper's, biased: its learned acceleration
  /// comes out ≈1.38× too large, docs/method.md §5), "rk4" or "verlet" (unbiased).
  std::string integrator = "euler";
  int integrator_substeps = 1;  // integrator steps per frame interval
  /// Schedule: `warmup_integrator` (one step per frame) during the first
  /// `integrator_warmup_epochs` epochs (fractions allowed), then `integrator`.
  std::string warmup_integrator = "euler";
  double integrator_warmup_epochs = 0;
  /// Bound on each keypoint's acceleration in the dynamics loss (normalized units / s²; 0 = none,
  /// the paper's); see LossOptions::max_acceleration.
  double max_acceleration = 0;
  double w_rec = 1.0, w_dyn = 1.0, w_bce = 1.0;
  /// Weight of the constraint residual of the estimated keypoints, L_con (LossOptions::w_con;
  /// 0 = the paper's objective).
  double w_con = 0.0;
  /// Relative weight of each holonomic constraint in L_con, in the system's order (empty = 1 for
  /// every one): L_con = Σ_t Σ_c w_c·Φ_c(x_t)². The cartpole's `[1.0, 0.0]` asks for the rail
  /// alone and leaves the pole's length free (docs/training.md, "Constraint residual"). keycld
  /// only; the count must equal the model's constraints.
  std::vector<double> con_weights;
  /// The VAE baselines' weights (docs/baselines.md): the KL of the posterior and the penalty
  /// (mean ‖encoder mean‖ − 1)² that keeps the unnormalised angle estimate near the unit circle
  /// (published: 1 and 0.01). KeyCLD and its ablations ignore them.
  double w_kl = 1.0, w_norm = 0.01;
  /// w_dyn ramps linearly from 0 to w_dyn over the first `w_dyn_warmup_epochs` epochs.
  double w_dyn_warmup_epochs = 0;
  bool augment = true;  // dihedral augmentation of the estimator input
  /// No augmentation during the first `augment_warmup_epochs` epochs (fractions allowed).
  double augment_warmup_epochs = 0;
  /// At the end of each of the first `keypoint_relabel_epochs` epochs the trainer compares every
  /// order of the keypoints by how much the holonomic constraints vary along the estimates of
  /// the first training runs and relabels the model to the best one when it varies less than
  /// half as much as the present order (train/relabel.h; keycld only; 0 = never, the paper's).
  int keypoint_relabel_epochs = 0;
  uint64_t seed = 0;
  int threads = 0;                 // LibTorch intra-op threads (0 = all cores)
  std::string device = "cpu";      // cpu | cuda | cuda:N
  std::string precision = "fp32";  // fp32 | bf16: the convolutions' arithmetic (autocast)
  /// How the estimator's and renderer's U-Nets are computed in training (model/onednn_unet.h):
  /// auto (winograd where this build has oneDNN and the run is CPU float32, else libtorch) |
  /// winograd | onednn | libtorch. A choice of speed; Winograd also of rounding
  /// (docs/benchmarks.md: the VPT it was validated with).
  std::string kernels = "auto";
  // [eval]
  int val_runs = 10;                    // validation runs for the per-epoch VPT (0 = all)
  double rtol = 1.4e-8, atol = 1.4e-8;  // Dormand–Prince tolerances

  /// Reads a TOML file; unknown keys and wrong types throw InputError naming the key.
  static TrainConfig FromToml(const std::filesystem::path& file);
  /// Fills fields from a TOML string (same rules); `origin` names it in errors.
  void MergeToml(const std::string& text, const std::string& origin);
  /// Optimizer steps per epoch: ⌊train_runs / batch_sequences⌋.
  int64_t StepsPerEpoch(int64_t train_runs) const;
  /// Total optimisation steps of the schedule: max_steps if set, else epochs × steps per epoch
  /// (`steps_per_epoch`, StepsPerEpoch of the training runs).
  int64_t TotalSteps(int64_t steps_per_epoch) const;
  /// Factor applied to both learning rates at optimisation step `step` (0-based) of `total`:
  /// 1 for "constant"; for "cosine" 1 until s₀ = lr_decay_start·total, then
  /// f + (1 − f)·½(1 + cos(π·(step − s₀)/(total − s₀))) with f = lr_final_scale.
  double LearningRateFactor(int64_t step, int64_t total) const;
  /// The dynamics loss's integrator, substeps, weights, horizon and the dynamics parameters'
  /// learning-rate scale at optimisation step `step`
  /// (0-based) of a run with `train_runs` steps per epoch (StepsPerEpoch; the schedules above).
  IntegratorMethod IntegratorAt(int64_t step, int64_t train_runs) const;
  int SubstepsAt(int64_t step, int64_t train_runs) const;
  double WDynAt(int64_t step, int64_t train_runs) const;
  int HorizonAt(int64_t step, int64_t train_runs) const;
  double DynamicsLrScaleAt(int64_t step, int64_t train_runs) const;
  /// The longest horizon of the schedule (the data's runs need ≥ this + 2 frames).
  int MaxHorizon() const;
  bool AugmentAt(int64_t step, int64_t train_runs) const;
  /// Throws InputError for an out-of-range value.
  void Validate() const;
  /// Sets `model` to another variant, as `--model` and the benchmark's cells do with a preset:
  /// the keypoint order check is for keycld's constraints, so any other model trains without it
  /// (keypoint_relabel_epochs = 0).
  void UseModel(const std::string& name);
  /// The resolved config as TOML (saved in the run folder as config.toml).
  std::string ToToml() const;
  /// The keys whose values differ from `other`'s, as "[section] key: A against B" joined
  /// by "; " (TOML spelling of the values); empty when the configs are equal.
  std::string Differences(const TrainConfig& other) const;
  /// The data set file: `data` if set, else the path `keycld generate` writes for env,
  /// control, size, runs, frames and data_seed under data/. Throws InputError if neither
  /// `data` nor `env` is set.
  std::filesystem::path DataFile() const;
};

/// The U-Net kernels a config's `kernels` names ("auto" resolved for `device` and
/// `precision`: Winograd on a CPU in float32 when this build has oneDNN, else LibTorch's
/// modules). Throws InputError for an unknown name, and for onednn or winograd on a build
/// without oneDNN, a CUDA device or bf16.
TrunkKernels ResolveTrunkKernels(const std::string& kernels, const std::string& device,
                                 const std::string& precision);

/// The folder of the TOML presets: $KEYCLD_CONFIGS if set, else the source tree's configs/.
std::filesystem::path DefaultConfigsDir();
/// The preset file configs/<preset>/<env>-<control>.toml (presets: "cpu-quick", "paper").
/// Throws InputError for an unknown preset, environment or control mode, or a combination
/// without a preset (the pendulum has no "under"), naming the available ones.
std::filesystem::path PresetFile(const std::string& preset, const std::string& env,
                                 const std::string& control);

}  // namespace keycld
