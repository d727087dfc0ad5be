// The keycld command line: each subcommand lives in its own apps/cmd_*.cc and registers itself
// with an Add*Command function. The runner it returns is called when that subcommand was
// parsed; it returns the process exit code and throws keycld::Error on failure (the caller
// prints one line and exits 1; 130 for an interruption).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace keycld {
struct StartEstimate;
}  // namespace keycld

namespace keycld::cli {

/// Options every subcommand may read (set before the runner is called).
struct GlobalOptions {
  std::string gl = "auto";        // --gl: auto | egl | osmesa
  std::vector<std::string> argv;  // the command line as given (keycld train --nproc reuses it)
};

/// keycld train --nproc N (launch.cc): runs `argv` without --nproc as N local ranks (RANK,
/// WORLD_SIZE, LOCAL_RANK set; a FileStore rendezvous in a temporary folder unless
/// `has_dist_init`; --threads cores/N unless `has_threads`), forwards Ctrl-C and SIGTERM to
/// them, stops the others when one fails, and returns the first failing rank's exit code (0 when
/// all succeed). Throws InputError (N outside [2, 256], or already inside a launcher), IoError.
int RunLocalRanks(int n, const std::vector<std::string>& argv, bool has_dist_init,
                  bool has_threads);

using Runner = std::function<int()>;

/// CLI11 check: a finite number in [lo, hi] (`lo_open`: lo itself excluded). Unlike CLI::Range,
/// it rejects NaN, and unlike CLI::PositiveNumber it prints the bounds as written, e.g.
/// "--hold: must be a finite number ≥ 0 and ≤ 3600, got nan".
inline CLI::Validator FiniteRange(double lo, double hi, bool lo_open = false) {
  auto text = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  std::string bounds = (lo_open ? "> " : "≥ ") + text(lo);
  if (std::isfinite(hi)) bounds += " and ≤ " + text(hi);
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(input, v) || !std::isfinite(v) || v < lo ||
            (lo_open && v == lo) || v > hi) {
          return "must be a finite number " + bounds + ", got " + input;
        }
        return "";
      },
      "NUMBER " + bounds);
}

/// --tta, --refine-start and --refine-lr of evaluate and predict, written into `s` (which must
/// outlive the parse): the start estimate of train/vpt.h (docs/evaluation.md, "Start estimate").
void AddStartEstimateOptions(CLI::App* cmd, StartEstimate* s);

Runner AddInfoCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddGenerateCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddRenderCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddTrainCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddRunCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddEvaluateCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddPredictCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddBenchmarkCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddControlCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddImportCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddExportCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);

}  // namespace keycld::cli
