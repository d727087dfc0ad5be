// keycld: learn constrained Lagrangian dynamics in keypoint coordinates from images.
// Every error is one line on stderr and exit code 1 (2 for a command-line usage error, 130 for
// an interruption). The subcommands are in apps/cmd_*.cc (commands.h).
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "keycld/sim/gl_context.h"
#include "keycld/util/allocator.h"
#include "keycld/util/error.h"
#include "keycld/util/text.h"

using namespace keycld;

namespace {

// Levenshtein distance of two short words.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The first word of the command line that is neither an option nor the value of --gl; "" if
// none. CLI11 would report an unknown one as an unexpected argument.
std::string CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--gl") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] != '-') return arg;
  }
  return "";
}

// "unknown command 'trian' (did you mean 'train'?)" for a word that names no subcommand.
std::string UnknownCommand(const std::string& word, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = 3;  // suggest only near misses
  for (const std::string& n : names) {
    const size_t d = EditDistance(word, n);
    if (d < best_distance) best = n, best_distance = d;
  }
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return "unknown command '" + word + "'" +
         (best.empty() ? "" : " (did you mean '" + best + "'?)") + "; the commands are " + all;
}

int Run(int argc, char** argv) {
  CLI::App app{
      "keycld: learning constrained Lagrangian dynamics in keypoint coordinates from "
      "images (KeyCLD)"};
  app.require_subcommand(1);
  app.fallthrough();  // --gl after the subcommand too
  auto global = std::make_shared<cli::GlobalOptions>();
  global->argv.assign(argv, argv + argc);
  app.add_option("--gl", global->gl, "OpenGL backend for headless rendering")
      ->check(CLI::IsMember(Names<GlBackend>()))
      ->capture_default_str();

  using Add = cli::Runner (*)(CLI::App&, std::shared_ptr<const cli::GlobalOptions>);
  const Add adders[] = {cli::AddInfoCommand,    cli::AddGenerateCommand,  cli::AddRenderCommand,
                        cli::AddTrainCommand,   cli::AddRunCommand,       cli::AddEvaluateCommand,
                        cli::AddPredictCommand, cli::AddBenchmarkCommand, cli::AddControlCommand,
                        cli::AddImportCommand,  cli::AddExportCommand};
  std::vector<std::pair<CLI::App*, cli::Runner>> commands;
  for (Add add : adders) {
    const size_t before = app.get_subcommands({}).size();
    cli::Runner runner = add(app, global);
    commands.emplace_back(app.get_subcommands({}).at(before), std::move(runner));
  }

  std::vector<std::string> names;
  for (const auto& [sub, runner] : commands) names.push_back(sub->get_name());
  if (const std::string word = CommandWord(argc, argv);
      !word.empty() && std::find(names.begin(), names.end(), word) == names.end()) {
    std::fprintf(stderr, "keycld: error: %s (see keycld --help)\n",
                 UnknownCommand(word, names).c_str());
    return 2;
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
  } catch (const c10::Error& e) {
    // A LibTorch error that no layer turned into a keycld error: its message, not its stack.
    std::fprintf(stderr, "keycld: error: %s\n", OneLine(e.what_without_backtrace()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "keycld: error: %s\n", OneLine(e.what()).c_str());
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
