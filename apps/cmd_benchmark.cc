// keycld benchmark: the paper's table of valid prediction times (docs/method.md §8, §9).
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "keycld/eval/benchmark.h"
#include "keycld/util/error.h"

namespace keycld::cli {

namespace {
struct BenchmarkArgs {
  std::vector<std::string> envs = Names<EnvName>();
  std::vector<std::string> controls = Names<ControlMode>();
  std::vector<std::string> models = ModelVariantNames();
  std::string preset = "cpu-quick", out, device, integrator, kernels, shard;
  bool collect = false;
  int seeds = 1, epochs = 0, threads = 0;
};

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}
}  // namespace

Runner AddBenchmarkCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<BenchmarkArgs>();
  auto* cmd = app.add_subcommand(
      "benchmark",
      "Train and evaluate KeyCLD, KeyCLD-NC and NODE2 on the benchmark settings and write the "
      "table of valid prediction times (resumable: finished cells are skipped)");
  cmd->add_option("--envs", a->envs, "Environments, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(Names<EnvName>()))
      ->capture_default_str();
  cmd->add_option("--controls", a->controls,
                  "Control modes, comma-separated (pendulum has no 'under': skipped)")
      ->delimiter(',')
      ->check(CLI::IsMember(Names<ControlMode>()))
      ->capture_default_str();
  cmd->add_option("--models", a->models, "Model variants, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(ModelVariantNames()))
      ->capture_default_str();
  cmd->add_option("--preset", a->preset,
                  "Training presets: paper | cpu-quick (configs/<preset>/<env>-<control>.toml) "
                  "or a folder of such files")
      ->capture_default_str();
  cmd->add_option("--seeds", a->seeds, "Training seeds 0 … N−1 per cell")
      ->check(FiniteRange(1, 1000))
      ->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "Override the presets' epochs (for a quick table)")
      ->check(FiniteRange(1, 1e6));
  cmd->add_option("--out", a->out, "Output folder (default runs/benchmark-<preset>)");
  cmd->add_option("--threads", a->threads, "LibTorch threads (0 = the preset's, else all cores)")
      ->check(FiniteRange(0, 256));
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N (default: the preset's)");
  cmd->add_option("--integrator", a->integrator,
                  "Override the presets' loss integrator: euler (the paper's) | rk4 | verlet")
      ->check(CLI::IsMember(FixedStepIntegratorNames()));
  cmd->add_option("--kernels", a->kernels,
                  "Override the presets' U-Net kernels: auto | winograd | onednn | libtorch")
      ->check(CLI::IsMember({"auto", "winograd", "onednn", "libtorch"}));
  auto* shard = cmd->add_option("--shard", a->shard,
                                "I/N: run only the cells whose index is I modulo N (a job array "
                                "of N shards filling one --out; no table, see --collect)");
  cmd->add_flag("--collect", a->collect,
                "Train nothing: write the table from the finished cells in --out, listing the "
                "missing ones")
      ->excludes(shard);
  return [a, global, shard] {
    BenchmarkOptions o;
    if (shard->count() > 0) std::tie(o.shard_index, o.shard_count) = ParseShard(a->shard);
    o.collect = a->collect;
    o.envs.clear();
    o.controls.clear();
    o.models.clear();
    for (const auto& e : a->envs) o.envs.push_back(ParseEnvName(e));
    for (const auto& c : a->controls) o.controls.push_back(ParseControlMode(c));
    for (const auto& m : a->models) o.models.push_back(FindModelVariant(m).name);
    o.preset = a->preset;
    o.seeds = a->seeds;
    o.epochs = a->epochs;
    o.out = a->out;
    o.threads = a->threads;
    o.device = a->device;
    o.integrator = a->integrator;
    o.kernels = a->kernels;
    o.gl = ParseGlBackend(global->gl);
    o.command = "keycld benchmark --envs " + Join(a->envs) + " --controls " + Join(a->controls) +
                " --models " + Join(a->models) + " --preset " + a->preset + " --seeds " +
                std::to_string(a->seeds) +
                (a->epochs > 0 ? " --epochs " + std::to_string(a->epochs) : "") +
                (a->integrator.empty() ? "" : " --integrator " + a->integrator);
    BenchmarkResult r = RunBenchmark(o);
    if (r.markdown.empty()) {
      int failed = 0;
      for (const auto& c : r.cells) failed += c.failed;
      std::printf(
          "shard %d/%d: %zu cell(s) done (%d failed) in %.1f s; write the table with "
          "the same options and --collect instead of --shard\n",
          o.shard_index, o.shard_count, r.cells.size(), failed, r.seconds);
      return 0;
    }
    std::printf("\n");
    std::FILE* md = std::fopen(r.markdown.c_str(), "r");
    if (md) {
      char buf[4096];
      while (size_t n = std::fread(buf, 1, sizeof buf, md)) std::fwrite(buf, 1, n, stdout);
      std::fclose(md);
    }
    std::printf("\nwrote %s, %s", r.markdown.c_str(), r.csv.c_str());
    if (!r.png.empty()) std::printf(", %s", r.png.c_str());
    std::printf(" in %.1f s\n", r.seconds);
    return 0;
  };
}

}  // namespace keycld::cli
