// The paper's comparison (docs/method.md §8, §9): valid prediction time of KeyCLD against KeyCLD-NC
// and NODE2 on the benchmark settings, from training presets, resumable cell by cell.
//
// A cell is one (environment, control mode, model, seed). Its run folder
// `<out>/<env>-<control>-<model>-seed<S>/` holds a normal training run (trainer.h) and
// result.json, the cell's evaluation: the VPT of every validation run of the data set, scored
// with the checkpoint of the last epoch. A finished cell is read back instead of recomputed; an
// interrupted one resumes training. The results are `<out>/results.md`, `results.csv` and
// `results.png`.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "keycld/data/dataset.h"
#include "keycld/models/registry.h"
#include "keycld/sim/environment.h"
#include "keycld/sim/gl_context.h"
#include "keycld/train/config.h"

namespace keycld {

struct BenchmarkOptions {
  std::vector<EnvName> envs = {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot};
  std::vector<ControlMode> controls = {ControlMode::kNone, ControlMode::kUnder, ControlMode::kFull};
  std::vector<std::string> models = ModelVariantNames();
  /// A folder of presets `<env>-<control>.toml`: a name under configs/ (paper, cpu-quick) or a
  /// path to a folder.
  std::string preset = "cpu-quick";
  int seeds = 1;                    // training seeds 0 … seeds − 1
  int epochs = 0;                   // > 0 overrides the presets' [train] epochs
  std::filesystem::path out;        // empty: runs/benchmark-<preset folder name>
  int threads = 0;                  // > 0 overrides [train] threads (LibTorch threads)
  std::string device;               // non-empty overrides [train] device
  std::string integrator;           // non-empty overrides [train] integrator (euler|rk4|verlet)
  std::string kernels;              // non-empty overrides [train] kernels (auto|winograd|onednn|libtorch)
  GlBackend gl = GlBackend::kAuto;  // for data sets that must be generated
  int eval_batch = 10;              // validation runs per Dormand–Prince batch
  std::string command;              // the command line, quoted in results.md
  bool progress = true;             // progress bars on a terminal
  bool quiet = false;               // no lines on stdout
  /// A job array's share: the cells whose index (in the order settings × models × seeds) is
  /// shard_index modulo shard_count. A shard trains and scores its cells only and writes no
  /// table (shards may run at once on one shared `out`); --collect writes it.
  int shard_index = 0, shard_count = 1;
  /// Train nothing: the table from the cells whose result.json is finished; the missing ones
  /// are listed in the notes.
  bool collect = false;
};

/// Cell `index` of a benchmark belongs to shard `shard_index` of `shard_count` (round-robin, so
/// that every shard gets cells of every setting and model). Throws InputError unless
/// 0 ≤ shard_index < shard_count.
bool CellInShard(int index, int shard_index, int shard_count);

/// "I/N" → (I, N), 0 ≤ I < N ≤ 100000 (Slurm: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT with
/// --array=0-(N−1)). Throws InputError naming the expected form.
std::pair<int, int> ParseShard(const std::string& text);

/// The outcome of one cell (the content of its result.json).
struct BenchmarkCell {
  EnvName env = EnvName::kPendulum;
  ControlMode control = ControlMode::kNone;
  std::string model = "keycld";
  int seed = 0;
  std::filesystem::path dir;
  bool failed = false;  // training stopped (non-finite loss); `error` says why
  std::string error;
  bool cached = false;  // read from result.json, nothing recomputed
  int epochs = 0;
  int64_t steps = 0;
  std::vector<int> vpt;  // frames, one per validation run
  double vpt_mean = 0, vpt_std = 0, vpt_median = 0;
  int fallback_runs = 0;     // runs Dormand–Prince could not integrate (see ValidationVpt)
  double train_seconds = 0;  // sum of the training step times (metrics.jsonl), all sessions
  double eval_seconds = 0;
  /// The state-grid checks of `keycld evaluate` (docs/evaluation.md, "Diagnostics"), for models
  /// with image keypoints on simulated data of a built-in system: the learned / true
  /// acceleration (1 = right; NaN = not measured, e.g. a result.json written before these
  /// checks) and each joint coordinate's RMS error of the estimated keypoints ("deg" or "m").
  double acceleration_scale = std::numeric_limits<double>::quiet_NaN();
  struct CoordinateError {
    std::string coordinate, unit;
    double error_rms = 0;
  };
  std::vector<CoordinateError> keypoints_vs_state;
};

/// One row of the table: an (environment, control mode, model) over all seeds.
struct BenchmarkRow {
  EnvName env = EnvName::kPendulum;
  ControlMode control = ControlMode::kNone;
  std::string model = "keycld";
  int seeds = 0;  // cells that produced a result
  int failed_seeds = 0;
  int runs = 0;                                      // validation runs pooled over the seeds
  double vpt_mean = 0, vpt_std = 0, vpt_median = 0;  // over the pooled runs (frames)
  double train_seconds = 0;                          // mean over the seeds
  int fallback_runs = 0;
};

/// A setting's floors (evaluate.h): the VPT of drawing its data set's mean frame (MeanFrameVpt)
/// and of holding each run's start frame (StillFrameVpt), means over the validation runs.
struct SettingFloor {
  EnvName env = EnvName::kPendulum;
  ControlMode control = ControlMode::kNone;
  double vpt_mean = 0;        // mean frame
  double still_vpt_mean = 0;  // start frame held still
};

struct BenchmarkResult {
  std::vector<BenchmarkCell> cells;
  std::vector<SettingFloor> floors;  // settings whose data set exists
  std::vector<BenchmarkRow> rows;
  std::vector<std::string> notes;            // skipped combinations, failures
  std::filesystem::path markdown, csv, png;  // empty for a shard (no table)
  double seconds = 0;                        // wall time of this call
  int missing_cells = 0;                     // --collect: cells not finished yet
};

/// The preset folder: `preset` itself if it is a directory, else configs/<preset> (relative to
/// the working directory). Throws InputError if neither exists.
std::filesystem::path ResolvePresetFolder(const std::string& preset);

/// VPT of every validation run (docs/method.md §8) of `data` with `model`: threshold ε from the
/// data set, Dormand–Prince with rtol and atol in float64, `batch` runs per rollout. When a batch
/// fails (NumericalError: the rollout diverged), its runs are redone one at a time, and a run
/// that still fails is scored from a fixed-step RK4 rollout (10 steps per frame) whose frames
/// count as invalid from the first non-finite keypoint on (VPT 0 if even that fails); their
/// number is returned in `fallback_runs`. Fills vpt, mean, std and median.
struct ValidationScore {
  std::vector<int> vpt;
  double mean = 0, std = 0, median = 0;
  int fallback_runs = 0;
};
ValidationScore ValidationVpt(Model& model, const Dataset& data, double rtol, double atol,
                              int batch = 10);

/// Mean, population standard deviation and median of the pooled VPTs of each (env, control,
/// model) of `cells`, in the order of first appearance. Failed cells count in failed_seeds only.
std::vector<BenchmarkRow> SummarizeCells(const std::vector<BenchmarkCell>& cells);

/// results.csv: a header `env,control,model,seeds,runs,vpt_mean,vpt_std,vpt_median,
/// train_seconds,failed_seeds,fallback_runs` and one line per row.
std::string ResultsCsv(const std::vector<BenchmarkRow>& rows);

/// results.md: the table of VPT mean ± std with one column per model (best mean per setting in
/// bold), the detailed rows, the notes and the wall time.
std::string ResultsMarkdown(const BenchmarkOptions& options, const BenchmarkResult& result);

/// results.png: grouped bars of VPT mean with ± std error bars, one group per setting and one
/// bar per model (eval/plot.h). Throws InputError for no rows, IoError.
void WriteResultsChart(const std::filesystem::path& png, const std::vector<BenchmarkRow>& rows,
                       const std::string& title);

/// Runs the benchmark: for every valid (env, control) of the options (pendulum has no "under":
/// skipped with a note), reads the preset, prepares its data set (generating it if missing),
/// then trains and evaluates every (model, seed) cell that is not finished, and writes
/// results.md, results.csv and results.png under `out`. Throws InputError (options, a missing
/// preset, a cell folder trained with another configuration), IoError, FormatError,
/// Interrupted (Ctrl-C during training: the cell's checkpoint is saved and a rerun resumes).
/// Cells whose training stops on a non-finite loss are recorded as failed, not thrown.
/// With shard_count > 1 only the shard's cells run and no table is written; with `collect`
/// nothing runs (no data set is generated) and the table holds the finished cells.
BenchmarkResult RunBenchmark(const BenchmarkOptions& options);

}  // namespace keycld
