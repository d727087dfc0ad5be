// metrics.jsonl of a training run: one JSON object per line, written by the trainer and read by
// evaluation and the benchmark. The one reader and writer of the format:
//   {"type":"step", step, epoch, loss, rec, dyn, bce, [kl | con,] lr, dynamics_lr, w_dyn,
//    integrator, horizon, seconds}
//   (kl: the VAE baselines' KL term, docs/baselines.md; con: the constraint residual L_con of
//   the keypoint models, train/loss.h, whatever its weight)
//   {"type":"epoch", epoch, step, seconds, [val_vpt_mean, val_vpt_std, val_vpt_median, val_runs,
//    dopri5_steps | val_error], [constraint_spread, best_constraint_spread, relabelled]}
//   (the keypoint order check of train/relabel.h in the first keypoint_relabel_epochs epochs:
//   the spread of the order the epoch ended with, the least spread of any order, and the order
//   the model was relabelled to, if it was)
// `step` counts optimiser steps from 1; `epoch` is 1-based; `seconds` is the step's own time
// for steps and the time since the invocation started for epochs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace keycld {

struct StepRecord {
  int64_t step = 0, epoch = 0;
  double loss = 0, rec = 0, dyn = 0, bce = 0;
  std::optional<double> kl;   // the VAE baselines only
  std::optional<double> con;  // the keypoint models only
  double lr = 0, dynamics_lr = 0, w_dyn = 0;  // dynamics_lr: the mass, V and B's
  std::string integrator;
  int64_t horizon = 0;  // P of the step's dynamics loss
  double seconds = 0;
};

struct EpochRecord {
  int64_t epoch = 0, step = 0;
  double seconds = 0;
  std::optional<double> vpt_mean, vpt_std, vpt_median;  // unset when no validation ran
  int64_t val_runs = 0, dopri5_steps = 0;
  std::string val_error;  // why the validation failed (a diverged rollout)
  std::optional<double> constraint_spread, best_constraint_spread;  // train/relabel.h
  std::vector<int64_t> relabelled;  // new keypoint k = old relabelled[k]; empty: not relabelled
};

struct MetricsHistory {
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
};

/// Reads a metrics.jsonl; lines that do not parse (an interrupted write) are skipped. A missing
/// file gives an empty history.
MetricsHistory ReadMetrics(const std::filesystem::path& file);

/// Appends records to a run's metrics.jsonl.
class MetricsWriter {
 public:
  /// Opens `file` for appending. With `keep_before_step` ≥ 0 (a resumed run), first rewrites the
  /// file (atomically) with only the records of steps ≤ keep_before_step and of epochs that
  /// ended at or before it, so the resumed run adds every later record exactly once; -1 starts
  /// an empty file. Throws IoError.
  MetricsWriter(const std::filesystem::path& file, int64_t keep_before_step);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  /// Queues a record; the queue is appended to the file by Flush() and whenever it holds
  /// kFlushBytes (so a live run's file grows during an epoch). IoError as Flush().
  void Append(const StepRecord& r);
  void Append(const EpochRecord& r);
  /// Appends the queued records to the file (one write(2)); IoError "cannot write '<file>':
  /// no space left on device" if the write failed. A partly written last line is skipped by
  /// ReadMetrics and dropped by the next resume.
  void Flush();

 private:
  static constexpr size_t kFlushBytes = 8192;
  std::filesystem::path file_;
  int fd_ = -1;
  std::string pending_;
};

/// Sum of the step times of epochs 1 … `epochs` (all of them when 0).
double TrainingSeconds(const MetricsHistory& history, int64_t epochs = 0);

}  // namespace keycld
