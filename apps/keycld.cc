// keycld: learn constrained Lagrangian dynamics in keypoint coordinates from images.
// Every error is one line on stderr and exit code 1 (2 for a command-line usage error, 130 for
// an interruption). The subcommands are in apps/cmd_*.cc (commands.h).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "commands.h"
#include "keycld/sim/gl_context.h"
#include "keycld/util/allocator.h"
#include "keycld/util/error.h"

using namespace keycld;

namespace {

int Run(int argc, char** argv) {
  CLI::App app{
      "keycld: learning constrained Lagrangian dynamics in keypoint coordinates from "
      "images (KeyCLD)"};
  app.require_subcommand(1);
  auto global = std::make_shared<cli::GlobalOptions>();
  app.add_option("--gl", global->gl, "OpenGL backend for headless rendering")
      ->check(CLI::IsMember(Names<GlBackend>()))
      ->capture_default_str();

  using Add = cli::Runner (*)(CLI::App&, std::shared_ptr<const cli::GlobalOptions>);
  const Add adders[] = {cli::AddInfoCommand,    cli::AddGenerateCommand,  cli::AddRenderCommand,
                        cli::AddTrainCommand,   cli::AddRunCommand,       cli::AddEvaluateCommand,
                        cli::AddPredictCommand, cli::AddBenchmarkCommand, cli::AddControlCommand};
  std::vector<std::pair<CLI::App*, cli::Runner>> commands;
  for (Add add : adders) {
    const size_t before = app.get_subcommands({}).size();
    cli::Runner runner = add(app, global);
    commands.emplace_back(app.get_subcommands({}).at(before), std::move(runner));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "keycld: error: %s (see keycld --help)\n", what.c_str());
    return 2;
  }

  try {
    for (auto& [sub, runner] : commands) {
      if (sub->parsed()) return runner();
    }
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "keycld: %s\n", e.what());
    return 130;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "keycld: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

// Output that could not be written (a full disk, a closed pipe) is an error too.
int main(int argc, char** argv) {
  TuneAllocatorForTraining();
  int rc = Run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "keycld: error: cannot write to standard output\n");
    return rc == 0 ? 1 : rc;
  }
  return rc;
}
