// keycld train | run: training, and the main job (data set + training).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "commands.h"
#include "keycld/eval/evaluate.h"
#include "keycld/eval/predict.h"
#include "keycld/eval/report.h"
#include "keycld/train/checkpoint.h"
#include "keycld/train/distributed.h"
#include "keycld/train/trainer.h"
#include "keycld/util/error.h"

namespace keycld::cli {

namespace {

void PrintTrainSummary(const TrainSummary& r, int batch_sequences = 1) {
  if (r.steps_this_call == 0) {
    std::printf(
        "the run is already complete at step %lld (raise --epochs or --steps to "
        "continue); checkpoint %s\n",
        static_cast<long long>(r.steps), r.checkpoint.c_str());
    return;
  }
  std::printf("trained %lld steps (%lld epochs) in %.1f s, %.3f s/step",
              static_cast<long long>(r.steps), static_cast<long long>(r.epochs_completed),
              r.seconds, r.seconds_per_step);
  if (batch_sequences > 1 && r.seconds_per_step > 0) {
    std::printf(" (%d sequences per step, %.2f sequences/s)", batch_sequences,
                batch_sequences / r.seconds_per_step);
  }
  std::printf("; ");
  if (r.val_vpt_mean >= 0) {
    std::printf("validation VPT mean %.2f, median %.1f frames (%d runs); ", r.val_vpt_mean,
                r.val_vpt_median, r.val_runs);
  }
  std::printf("checkpoint %s\n", r.checkpoint.c_str());
}

// `keycld run`'s prediction step (the prediction video and CSV; fills `report`).
void PredictJob(const std::filesystem::path& run_dir, const std::filesystem::path& data, int frames,
                const GlobalOptions& global, RunReportInputs* report) {
  PredictOptions p;
  p.run_dir = run_dir;
  p.data = data;
  p.frames = frames;
  p.gl = ParseGlBackend(global.gl);
  PredictionOutput out = WritePrediction(p);
  report->prediction_files = {out.gif, out.mse_plot, out.csv};
  const bool keypoints =
      FindModelVariant(ReadCheckpointSpec(run_dir / "checkpoints" / "last.pt").model)
          .image_keypoints;
  char line[320];
  std::snprintf(line, sizeof line,
                "Validation run %d (data-set run %d), %d frames (%d stored, %d re-simulated): "
                "valid for %d frames; panels: ground truth | %s | prediction | error.",
                0, out.dataset_run, out.frames, out.stored_frames, out.simulated_frames, out.vpt,
                keypoints ? "estimated heatmaps and keypoints"
                          : "the frame reconstructed from the model's estimate");
  report->prediction_summary = line;
  std::printf("%s\n", line);
}

struct TrainArgs {
  std::string data, out, config, device, model, precision, kernels, integrator, dist_init;
  std::string dist_backend = "gloo";
  double dist_timeout = 900;
  std::optional<int> epochs, hidden, threads, batch_sequences, nproc;
  std::optional<double> lr, integrator_warmup;
  std::optional<int64_t> steps, seed;
  bool resume = false;
};

}  // namespace

// The process group the launcher's environment describes (torchrun, srun, --nproc), or null.
// A watchdog ends the process if the rendezvous outlives its timeout by a minute: a store
// address held by something that is not a c10d store can block c10d's client without a timeout.
std::shared_ptr<Communicator> JoinProcessGroup(const TrainArgs& a, bool backend_given) {
  std::optional<DistributedOptions> d = DistributedFromEnvironment(a.dist_init);
  if (!d) {
    if (backend_given) {
      throw InputError("--dist-backend needs a distributed run (--nproc, or RANK and WORLD_SIZE)");
    }
    return nullptr;
  }
  d->backend = a.dist_backend;
  d->timeout_seconds = a.dist_timeout;
  std::mutex m;
  std::condition_variable cv;
  bool joined = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    const auto limit = std::chrono::duration<double>(d->timeout_seconds + 60);
    if (!cv.wait_for(lock, limit, [&] { return joined; })) {
      std::fprintf(stderr,
                   "keycld: error: rank %d of %d at %s: the rendezvous did not complete within "
                   "%g s (--dist-timeout %g s, + 60 s); is the address a keycld rank 0?\n",
                   d->rank, d->world_size, d->init.c_str(), d->timeout_seconds + 60,
                   d->timeout_seconds);
      std::_Exit(1);
    }
  });
  auto stop = [&] {
    {
      std::lock_guard<std::mutex> lock(m);
      joined = true;
    }
    cv.notify_all();
    watchdog.join();
  };
  try {
    auto c = Communicator::Connect(*d);
    stop();
    return c;
  } catch (...) {
    stop();
    throw;
  }
}

Runner AddTrainCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train",
                                 "Train KeyCLD (or its ablations keycld-nc, node2 or the baselines "
                                 "lag-vae, lag-cavae, hgn) on a data set (unsupervised)");
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
  cmd->add_option("--precision", a->precision,
                  "fp32 | bf16: arithmetic of the estimator's and renderer's convolutions "
                  "(bf16 autocast needs AVX512-BF16/AMX or a CUDA device)")
      ->check(CLI::IsMember(Names<Precision>()));
  cmd->add_option("--kernels", a->kernels,
                  "How the U-Nets train: auto (winograd on a CPU in fp32, else libtorch) | "
                  "winograd | onednn (the fused oneDNN U-Net, Winograd or direct convolutions) | "
                  "libtorch (LibTorch's modules); docs/benchmarks.md")
      ->check(CLI::IsMember({"auto", "winograd", "onednn", "libtorch"}));
  cmd->add_option(
         "--model", a->model,
         "keycld | keycld-nc (no constraints) | node2 (black-box ODE) | lag-vae | lag-cavae "
         "(the paper's VAE baselines, built-in systems) | hgn (Hamiltonian Generative Network, "
         "unactuated data only); train the baselines with their presets "
         "configs/cpu-quick/*-<model>.toml; default keycld")
      ->check(CLI::IsMember(ModelVariantNames()));
  cmd->add_option("--integrator", a->integrator,
                  "Integrator of the dynamics loss after the warm-up: euler (the paper's, "
                  "biased) | rk4 | verlet")
      ->check(CLI::IsMember(FixedStepIntegratorNames()));
  cmd->add_option("--integrator-warmup-epochs", a->integrator_warmup,
                  "Epochs trained with the warm-up integrator before --integrator (0 = none)")
      ->check(FiniteRange(0, 1e6));
  cmd->add_flag("--resume", a->resume, "Continue the run in --out from its last checkpoint");
  cmd->add_option("--batch-sequences", a->batch_sequences,
                  "Sequences per optimizer step, over all ranks (default: the config's, at least "
                  "one per rank)")
      ->check(FiniteRange(1, 4096));
  cmd->add_option("--nproc", a->nproc,
                  "Train data-parallel on N local ranks (Gloo; docs/distributed.md)")
      ->check(FiniteRange(2, 256));
  cmd->add_option("--dist-init", a->dist_init,
                  "Rendezvous of a distributed run: tcp://HOST:PORT | file:///PATH (default "
                  "tcp://$MASTER_ADDR:$MASTER_PORT; ranks from RANK/WORLD_SIZE or Slurm)");
  auto* backend =
      cmd->add_option("--dist-backend", a->dist_backend, "gloo | nccl (NCCL needs a CUDA LibTorch)")
          ->check(CLI::IsMember({"gloo", "nccl"}))
          ->capture_default_str();
  cmd->add_option("--dist-timeout", a->dist_timeout,
                  "Seconds a rank waits for the others before it stops with an error")
      ->check(FiniteRange(1, 604800))
      ->capture_default_str();
  return [a, global, backend] {
    if (a->nproc) {
      return RunLocalRanks(*a->nproc, global->argv, !a->dist_init.empty(), bool(a->threads));
    }
    TrainOptions t;
    t.run_dir = a->out;
    t.resume = a->resume;
    if (a->resume) {
      auto saved = std::filesystem::path(a->out) / "config.toml";
      if (!std::filesystem::exists(saved)) {
        throw InputError("nothing to resume: '" + saved.string() + "' does not exist");
      }
      t.config = TrainConfig::FromToml(saved);
      if (a->batch_sequences && *a->batch_sequences != t.config.batch_sequences) {
        throw InputError("--batch-sequences " + std::to_string(*a->batch_sequences) + ": '" +
                         a->out + "' trains with " + std::to_string(t.config.batch_sequences) +
                         " sequences per step, and the batch is part of a run (start a new one " +
                         "to change it)");
      }
      if (!a->config.empty() || a->hidden || a->seed || !a->model.empty() ||
          !a->integrator.empty() || a->integrator_warmup ||

          (!a->data.empty() &&
           !(std::filesystem::exists(a->data) && std::filesystem::exists(t.config.DataFile()) &&
             std::filesystem::equivalent(a->data, t.config.DataFile())))) {
        throw InputError(
            "--resume continues the saved configuration; only --epochs, "
            "--steps, --lr, --threads, --device, --precision and --kernels may change");
      }
    } else {
      if (!a->config.empty()) t.config = TrainConfig::FromToml(a->config);
      if (!a->data.empty()) t.config.data = a->data;
      t.config.DataFile();  // throws if no data set is named
      if (a->hidden) t.config.hidden = *a->hidden;
      if (a->seed && *a->seed < 0) throw InputError("--seed must be ≥ 0");
      if (a->seed) t.config.seed = uint64_t(*a->seed);
      if (!a->model.empty()) t.config.UseModel(FindModelVariant(a->model).name);
      if (!a->integrator.empty()) t.config.integrator = a->integrator;
      if (a->integrator_warmup) t.config.integrator_warmup_epochs = *a->integrator_warmup;
      if (a->batch_sequences) t.config.batch_sequences = *a->batch_sequences;
    }
    if (a->epochs) t.config.epochs = *a->epochs;
    if (a->steps) t.config.max_steps = *a->steps;
    if (a->lr) t.config.lr = *a->lr;
    if (a->threads) t.config.threads = *a->threads;
    if (!a->device.empty()) t.config.device = a->device;
    if (!a->precision.empty()) t.config.precision = a->precision;
    if (!a->kernels.empty()) t.config.kernels = a->kernels;
    t.communicator = JoinProcessGroup(*a, backend->count() > 0);
    const int world = t.communicator ? t.communicator->world_size() : 1;
    const bool leader = !t.communicator || t.communicator->rank() == 0;
    if (world > 1 && !a->resume && !a->batch_sequences && t.config.batch_sequences % world != 0) {
      // Without --batch-sequences: the config's batch, raised to a multiple of the world size.
      const int b = (t.config.batch_sequences + world - 1) / world * world;
      if (leader) {
        std::printf("batch_sequences %d → %d: at least one sequence per rank on %d ranks\n",
                    t.config.batch_sequences, b, world);
      }
      t.config.batch_sequences = b;
    }
    const TrainSummary summary = Train(t);
    if (leader) PrintTrainSummary(summary, t.config.batch_sequences);
    return 0;
  };
}

namespace {
struct RunArgs {
  std::string env = "pendulum", control = "none", preset = "cpu-quick", config, out, integrator,
      kernels;
  int predict_frames = 500;
};

// The main job's training options: the preset's or --config's config, and the run folder;
// a run folder that holds a run continues with its saved config (only a longer schedule may be
// asked for).
TrainOptions MainJobTraining(const RunArgs& a, std::filesystem::path* config_file) {
  *config_file =
      a.config.empty() ? PresetFile(a.preset, a.env, a.control) : std::filesystem::path(a.config);
  TrainOptions t;
  t.config = TrainConfig::FromToml(*config_file);
  if (!a.integrator.empty()) t.config.integrator = a.integrator;
  if (!a.kernels.empty()) t.config.kernels = a.kernels;
  t.config.Validate();
  t.run_dir = !a.out.empty() ? std::filesystem::path(a.out)
              : a.config.empty()
                  ? std::filesystem::path("runs") / (a.env + "-" + a.control + "-" + a.preset)
                  : std::filesystem::path("runs") / config_file->stem();
  t.resume = std::filesystem::exists(t.run_dir / "checkpoints" / "last.pt");
  if (!t.resume) return t;
  TrainConfig saved = TrainConfig::FromToml(t.run_dir / "config.toml");
  // Compared as Train records it (a named data file contributes its own parameters).
  TrainConfig wanted = t.config.data.empty()
                           ? t.config
                           : RecordedConfig(t.config, Dataset::Open(t.config.DataFile()).info());
  wanted.epochs = saved.epochs;
  wanted.max_steps = saved.max_steps;
  wanted.kernels = saved.kernels;  // a choice of speed: --kernels may change it on resume
  if (const std::string diff = wanted.Differences(saved); !diff.empty()) {
    throw InputError("'" + t.run_dir.string() + "' was started with another configuration than '" +
                     config_file->string() + "' (the config against the run: " + diff +
                     "): use --out for a new run");
  }
  saved.epochs = t.config.epochs;
  saved.max_steps = t.config.max_steps;
  if (!a.kernels.empty()) saved.kernels = a.kernels;
  t.config = saved;
  return t;
}

// keycld run: data set, training, evaluation, prediction, report.
int RunMainJob(const RunArgs& a, const GlobalOptions& global) {
  const auto job_start = std::chrono::steady_clock::now();
  std::filesystem::path config_file;
  TrainOptions t = MainJobTraining(a, &config_file);
  PreparedDataset prepared = PrepareDataset(t.config, ParseGlBackend(global.gl));
  const std::filesystem::path data_file = prepared.path;
  double data_seconds = -1;
  if (prepared.generated) {
    data_seconds = prepared.generation.seconds;
    std::printf("[1/4] wrote %s in %.1f s (%.0f frames/s)\n", data_file.c_str(),
                prepared.generation.seconds, prepared.generation.frames_per_second);
  } else {
    std::printf("[1/4] using data set %s\n", data_file.c_str());
  }
  std::printf("[2/4] training in %s%s\n", t.run_dir.c_str(), t.resume ? " (resuming)" : "");
  std::fflush(stdout);
  TrainSummary ts = Train(t);
  PrintTrainSummary(ts);

  std::printf("[3/4] evaluating on every validation run\n");
  std::fflush(stdout);
  EvaluateOptions eo;
  eo.run_dir = t.run_dir;
  eo.data = data_file;
  EvaluationReport er = Evaluate(eo);
  std::printf("%s", FormatEvaluationSummary(er).c_str());

  RunReportInputs ri;
  if (a.predict_frames > 0) {
    std::printf("[4/4] predicting %d frames of validation run 0\n", a.predict_frames);
    std::fflush(stdout);
    PredictJob(t.run_dir, data_file, a.predict_frames, global, &ri);
  }
  ri.run_dir = t.run_dir;
  ri.config_file = config_file;
  ri.data_file = data_file;
  ri.data_seconds = data_seconds;
  ri.train_steps = ts.steps;
  ri.train_seconds = ts.seconds;
  ri.seconds_per_step = ts.seconds_per_step;
  ri.evaluation = er;
  ri.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - job_start).count();
  const std::filesystem::path report = WriteRunReport(ri);
  std::printf("done in %.0f s: VPT %.2f ± %.2f frames (median %.1f); report: %s\n",
              ri.total_seconds, er.vpt.mean, er.vpt.std, er.vpt.median, report.c_str());
  return 0;
}

}  // namespace

Runner AddRunCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand(
      "run",
      "The main job: generate (or reuse) the data set, train (resuming an interrupted "
      "run), evaluate, predict, and write RUN_DIR/report/report.md");
  auto* env =
      cmd->add_option("--env", a->env, "pendulum | cartpole | acrobot")->capture_default_str();
  auto* control =
      cmd->add_option("--control", a->control, "none | under | full")->capture_default_str();
  auto* preset =
      cmd->add_option("--preset", a->preset,
                      "cpu-quick (about 25 min on 2 cores for the pendulum) | paper "
                      "(docs/method.md, GPU)")
          ->check(CLI::IsMember({"cpu-quick", "paper"}))
          ->capture_default_str();
  cmd->add_option("--config", a->config, "A TOML config instead of a preset")
      ->excludes(env)
      ->excludes(control)
      ->excludes(preset);
  cmd->add_option("--out", a->out,
                  "Run folder (default runs/<env>-<control>-<preset>, or runs/<config name>)");
  cmd->add_option("--predict-frames", a->predict_frames,
                  "Frames of the prediction video (0 = none)")
      ->check(CLI::Validator(
          [](std::string& input) -> std::string {
            int v = -1;
            if (CLI::detail::lexical_cast(input, v) && (v == 0 || (v >= 3 && v <= 100000))) {
              return "";
            }
            return "must be 0 (no prediction) or in [3, 100000], got " + input;
          },
          "0 or 3-100000"))
      ->capture_default_str();
  cmd->add_option("--integrator", a->integrator,
                  "Override the config's loss integrator: euler (the paper's) | rk4 | verlet")
      ->check(CLI::IsMember(FixedStepIntegratorNames()));
  cmd->add_option("--kernels", a->kernels,
                  "Override the config's U-Net kernels: auto | winograd | onednn | libtorch")
      ->check(CLI::IsMember({"auto", "winograd", "onednn", "libtorch"}));
  return [a, global] { return RunMainJob(*a, *global); };
}

}  // namespace keycld::cli
