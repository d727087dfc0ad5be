// The report of `keycld run`: one Markdown page linking every number, figure and video.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "keycld/eval/evaluate.h"

namespace keycld {

struct RunReportInputs {
  std::filesystem::path run_dir, config_file, data_file;
  double data_seconds = -1;        // generation time (−1: the data set was reused)
  int64_t train_steps = 0;         // total optimizer steps of the run
  double train_seconds = 0;        // wall time of this invocation's training
  double seconds_per_step = 0;     // mean over this invocation (0: nothing trained now)
  double total_seconds = 0;        // wall time of the whole job
  EvaluationReport evaluation;
  // Prediction outputs (empty when not made), relative paths are resolved against out_dir.
  std::vector<std::filesystem::path> prediction_files;
  std::string prediction_summary;
};

/// Writes RUN_DIR/report/report.md atomically and returns its path. Throws IoError.
std::filesystem::path WriteRunReport(const RunReportInputs& inputs);

}  // namespace keycld
