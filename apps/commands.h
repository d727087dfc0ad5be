// The keycld command line: each subcommand lives in its own apps/cmd_*.cc and registers itself
// with an Add*Command function. The runner it returns is called when that subcommand was
// parsed; it returns the process exit code and throws keycld::Error on failure (the caller
// prints one line and exits 1; 130 for an interruption).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>

namespace keycld::cli {

/// Options every subcommand may read (set before the runner is called).
struct GlobalOptions {
  std::string gl = "auto";  // --gl: auto | egl | osmesa
};

using Runner = std::function<int()>;

Runner AddInfoCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddGenerateCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddRenderCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddTrainCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddRunCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddEvaluateCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddPredictCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddBenchmarkCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);
Runner AddControlCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global);

}  // namespace keycld::cli
