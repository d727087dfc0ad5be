// keycld train | run: training, and the main job (data set + training).
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "keycld/train/trainer.h"
#include "keycld/util/error.h"

namespace keycld::cli {

namespace {

void PrintTrainSummary(const TrainSummary& r) {
  if (r.steps_this_call == 0) {
    std::printf("the run is already complete at step %lld (raise --epochs or --steps to "
                "continue); checkpoint %s\n",
                static_cast<long long>(r.steps), r.checkpoint.c_str());
    return;
  }
  std::printf("trained %lld steps (%lld epochs) in %.1f s, %.3f s/step; ",
              static_cast<long long>(r.steps), static_cast<long long>(r.epochs_completed),
              r.seconds, r.seconds_per_step);
  if (r.val_vpt_mean >= 0) {
    std::printf("validation VPT mean %.2f, median %.1f frames (%d runs); ", r.val_vpt_mean,
                r.val_vpt_median, r.val_runs);
  }
  std::printf("checkpoint %s\n", r.checkpoint.c_str());
}

struct TrainArgs {
  std::string data, out, config, device, model;
  std::optional<int> epochs, hidden, threads;
  std::optional<double> lr;
  std::optional<int64_t> steps, seed;
  bool resume = false;
};

}  // namespace

Runner AddTrainCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand(
      "train", "Train KeyCLD (or the keycld-nc / node2 variants) on a data set (unsupervised)");
  cmd->add_option("--data", a->data, "HDF5 data set (keycld generate)");
  cmd->add_option("--out", a->out, "Run folder (config.toml, checkpoints/, metrics.jsonl)")
      ->required();
  cmd->add_option("--config", a->config, "TOML preset (configs/*.toml)");
  cmd->add_option("--epochs", a->epochs, "Epochs over the training runs (paper: 40)");
  cmd->add_option("--hidden", a->hidden, "Hidden width h (paper: 32)");
  cmd->add_option("--lr", a->lr, "Learning rate of estimator and renderer (paper: 3e-4)");
  cmd->add_option("--steps", a->steps, "Stop after this many steps in total");
  cmd->add_option("--seed", a->seed, "Random seed (≥ 0)");
  cmd->add_option("--threads", a->threads, "LibTorch threads (0 = all cores)");
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N");
  cmd->add_option("--model", a->model,
                  "keycld | keycld-nc (no constraints) | node2 (black-box ODE); default keycld")
      ->check(CLI::IsMember({"keycld", "keycld-nc", "node2"}));
  cmd->add_flag("--resume", a->resume, "Continue the run in --out from its last checkpoint");
  return [a] {
    TrainOptions t;
    t.run_dir = a->out;
    t.resume = a->resume;
    if (a->resume) {
      auto saved = std::filesystem::path(a->out) / "config.toml";
      if (!std::filesystem::exists(saved)) {
        throw InputError("nothing to resume: '" + saved.string() + "' does not exist");
      }
      t.config = TrainConfig::FromToml(saved);
      if (!a->config.empty() || a->hidden || a->seed || !a->model.empty() ||
          (!a->data.empty() && !(std::filesystem::exists(a->data) &&
                                 std::filesystem::exists(t.config.DataFile()) &&
                                 std::filesystem::equivalent(a->data, t.config.DataFile())))) {
        throw InputError("--resume continues the saved configuration; only --epochs, "
                         "--steps, --lr, --threads and --device may change");
      }
    } else {
      if (!a->config.empty()) t.config = TrainConfig::FromToml(a->config);
      if (!a->data.empty()) t.config.data = a->data;
      t.config.DataFile();  // throws if no data set is named
      if (a->hidden) t.config.hidden = *a->hidden;
      if (a->seed && *a->seed < 0) throw InputError("--seed must be ≥ 0");
      if (a->seed) t.config.seed = uint64_t(*a->seed);
      if (!a->model.empty()) t.config.model = ParseModelKind(a->model);
    }
    if (a->epochs) t.config.epochs = *a->epochs;
    if (a->steps) t.config.max_steps = *a->steps;
    if (a->lr) t.config.lr = *a->lr;
    if (a->threads) t.config.threads = *a->threads;
    if (!a->device.empty()) t.config.device = a->device;
    PrintTrainSummary(Train(t));
    return 0;
  };
}

namespace {
struct RunArgs {
  std::string config = "configs/cpu-quick/pendulum-none.toml", out;
};
}  // namespace

Runner AddRunCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run", "The main job: generate the config's data set if missing, then train (resuming "
             "an interrupted run)");
  cmd->add_option("--config", a->config, "TOML preset")->capture_default_str();
  cmd->add_option("--out", a->out, "Run folder (default runs/<config name>)");
  return [a, global] {
    TrainOptions t;
    t.config = TrainConfig::FromToml(a->config);
    t.config.Validate();
    t.run_dir = a->out.empty() ? std::filesystem::path("runs") /
                                     std::filesystem::path(a->config).stem()
                               : std::filesystem::path(a->out);
    const bool resume = std::filesystem::exists(t.run_dir / "checkpoints" / "last.pt");
    if (resume) {
      // The run continues with its saved config; only a longer schedule may be asked for.
      TrainConfig saved = TrainConfig::FromToml(t.run_dir / "config.toml");
      TrainConfig wanted = t.config;
      wanted.epochs = saved.epochs;
      wanted.max_steps = saved.max_steps;
      if (wanted.ToToml() != saved.ToToml()) {
        throw InputError("'" + t.run_dir.string() + "' was started with another " +
                         "configuration than '" + a->config + "': use --out for a new run");
      }
      saved.epochs = t.config.epochs;
      saved.max_steps = t.config.max_steps;
      t.config = saved;
    }
    PreparedDataset data = PrepareDataset(t.config, ParseGlBackend(global->gl));
    if (data.generated) {
      std::printf("wrote %s in %.1f s (%.0f frames/s)\n", data.path.c_str(),
                  data.generation.seconds, data.generation.frames_per_second);
    } else {
      std::printf("using data set %s\n", data.path.c_str());
    }
    t.resume = resume;
    if (t.resume) std::printf("resuming the run in %s\n", t.run_dir.c_str());
    std::fflush(stdout);
    PrintTrainSummary(Train(t));
    return 0;
  };
}

}  // namespace keycld::cli
