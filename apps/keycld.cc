// keycld: learn constrained Lagrangian dynamics in keypoint coordinates from images.
// Subcommands: info, generate, render, train, run. Every error is one line on stderr and exit code 1
// (2 for a command-line usage error, 130 for an interruption).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "keycld/data/generate.h"
#include "keycld/sim/gl_context.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/train/trainer.h"
#include "keycld/util/error.h"
#include "keycld/util/image_io.h"

using namespace keycld;

namespace {

int RunInfo(const std::string& gl_name) {
  std::printf("keycld %s\n", KEYCLD_VERSION);
  std::printf("LibTorch %s (threads: %d intra-op, %u cores)\n", TORCH_VERSION,
              torch::get_num_threads(), std::thread::hardware_concurrency());
  std::printf("CUDA available: %s", torch::cuda::is_available() ? "yes" : "no");
  if (torch::cuda::is_available()) std::printf(" (%zu devices)", torch::cuda::device_count());
  std::printf("\nMuJoCo %s\n", MujocoVersion().c_str());
  std::printf("assets: %s\n", DefaultAssetsDir().c_str());
  std::vector<std::string> attempts;
  auto gl = GlContext::Create(ParseGlBackend(gl_name), &attempts);
  for (const auto& a : attempts) std::printf("GL attempt failed: %s\n", a.c_str());
  const GlInfo& i = gl->info();
  std::printf("GL backend: %s via %s\nGL vendor: %s\nGL renderer: %s\nGL version: %s\n",
              GlBackendName(i.backend).c_str(), i.platform.c_str(), i.vendor.c_str(),
              i.renderer.c_str(), i.version.c_str());
  return 0;
}

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

}  // namespace

int Run(int argc, char** argv);

// Output that could not be written (a full disk, a closed pipe) is an error too.
int main(int argc, char** argv) {
  int rc = Run(argc, argv);
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "keycld: error: cannot write to standard output\n");
    return rc == 0 ? 1 : rc;
  }
  return rc;
}

int Run(int argc, char** argv) {
  CLI::App app{"keycld: learning constrained Lagrangian dynamics in keypoint coordinates from "
               "images (KeyCLD)"};
  app.require_subcommand(1);
  std::string gl_name = "auto";
  app.add_option("--gl", gl_name, "OpenGL backend for headless rendering")
      ->check(CLI::IsMember({"auto", "egl", "osmesa"}))
      ->capture_default_str();

  app.add_subcommand("info", "Print versions, threads, devices and the GL backend chosen");

  // generate
  GenerateOptions gen;
  std::string env_name = "pendulum", control_name = "none", out_dir = "data";
  auto* generate = app.add_subcommand("generate", "Generate a KeyCLD data set (HDF5)");
  generate->add_option("--env", env_name, "pendulum | cartpole | acrobot")->capture_default_str();
  generate->add_option("--control", control_name, "none | under | full")->capture_default_str();
  generate->add_option("--runs", gen.runs, "Number of runs (the last 10% are validation)")
      ->capture_default_str();
  generate->add_option("--frames", gen.frames, "Frames per run")->capture_default_str();
  generate->add_option("--size", gen.size, "Image side in pixels")->capture_default_str();
  int64_t gen_seed = 0;
  generate->add_option("--seed", gen_seed, "Random seed of the whole data set (≥ 0)")
      ->capture_default_str();
  generate->add_option("--workers", gen.workers, "Render threads (0 = one per core)")
      ->capture_default_str();
  generate->add_option("--out", out_dir, "Output folder")->capture_default_str();
  generate->add_flag("--force", gen.force, "Regenerate even if the file exists");

  // render
  std::string render_env = "pendulum", render_out = "frame.png";
  std::vector<double> render_qpos;
  int render_size = 256;
  auto* render = app.add_subcommand("render", "Render one state of a system to a PNG");
  render->add_option("--env", render_env, "pendulum | cartpole | acrobot")->capture_default_str();
  render->add_option("--qpos", render_qpos, "Joint positions (rad / m); default all zero");
  render->add_option("--size", render_size, "Image side in pixels")->capture_default_str();
  render->add_option("--out", render_out, "PNG file")->capture_default_str();

  // train
  std::string train_data, train_out, train_config, train_device, train_dynamics;
  std::optional<int> train_epochs, train_hidden, train_threads;
  std::optional<double> train_lr;
  std::optional<int64_t> train_steps;
  std::optional<int64_t> train_seed;
  bool train_resume = false;
  auto* train = app.add_subcommand("train", "Train KeyCLD on a data set (unsupervised)");
  train->add_option("--data", train_data, "HDF5 data set (keycld generate)");
  train->add_option("--out", train_out, "Run folder (config.toml, checkpoints/, metrics.jsonl)")
      ->required();
  train->add_option("--config", train_config, "TOML preset (configs/*.toml)");
  train->add_option("--epochs", train_epochs, "Epochs over the training runs (paper: 40)");
  train->add_option("--hidden", train_hidden, "Hidden width h (paper: 32)");
  train->add_option("--lr", train_lr, "Learning rate of estimator and renderer (paper: 3e-4)");
  train->add_option("--steps", train_steps, "Stop after this many steps in total");
  train->add_option("--seed", train_seed, "Random seed (≥ 0)");
  train->add_option("--threads", train_threads, "LibTorch threads (0 = all cores)");
  train->add_option("--device", train_device, "cpu | cuda | cuda:N");
  train->add_option("--dynamics", train_dynamics, "constrained (KeyCLD) | unconstrained (NC)");
  train->add_flag("--resume", train_resume, "Continue the run in --out from its last checkpoint");

  // run
  std::string run_config = "configs/cpu/pendulum-none.toml", run_out;
  auto* run = app.add_subcommand(
      "run", "The main job: generate the config's data set if missing, then train (resuming "
             "an interrupted run)");
  run->add_option("--config", run_config, "TOML preset")->capture_default_str();
  run->add_option("--out", run_out, "Run folder (default runs/<config name>)");

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
    if (app.got_subcommand("info")) return RunInfo(gl_name);
    if (app.got_subcommand("generate")) {
      gen.env = ParseEnvName(env_name);
      gen.control = ParseControlMode(control_name);
      gen.out_dir = out_dir;
      if (gen_seed < 0) throw InputError("--seed must be ≥ 0, got " + std::to_string(gen_seed));
      gen.seed = uint64_t(gen_seed);
      gen.gl = ParseGlBackend(gl_name);
      GenerateResult r = GenerateDataset(gen);
      if (r.reused) {
        std::printf("reusing existing data set %s (same parameters; --force regenerates)\n",
                    r.path.c_str());
      } else {
        std::printf("wrote %s: %d runs x %d frames at %dx%d in %.1f s (%.0f frames/s), "
                    "VPT threshold eps = %.6f\n",
                    r.path.c_str(), r.info.runs, r.info.frames, r.info.size, r.info.size,
                    r.seconds, r.frames_per_second, r.info.vpt_epsilon);
      }
      return 0;
    }
    if (app.got_subcommand("train")) {
      TrainOptions t;
      t.run_dir = train_out;
      t.resume = train_resume;
      if (train_resume) {
        auto saved = std::filesystem::path(train_out) / "config.toml";
        if (!std::filesystem::exists(saved)) {
          throw InputError("nothing to resume: '" + saved.string() + "' does not exist");
        }
        t.config = TrainConfig::FromToml(saved);
        if (!train_config.empty() || train_hidden || train_seed || !train_dynamics.empty() ||
            (!train_data.empty() &&
             !(std::filesystem::exists(train_data) &&
               std::filesystem::exists(t.config.DataFile()) &&
               std::filesystem::equivalent(train_data, t.config.DataFile())))) {
          throw InputError("--resume continues the saved configuration; only --epochs, "
                           "--steps, --lr, --threads and --device may change");
        }
      } else {
        if (!train_config.empty()) t.config = TrainConfig::FromToml(train_config);
        if (!train_data.empty()) t.config.data = train_data;
        t.config.DataFile();  // throws if no data set is named
        if (train_hidden) t.config.hidden = *train_hidden;
        if (train_seed && *train_seed < 0) throw InputError("--seed must be ≥ 0");
        if (train_seed) t.config.seed = uint64_t(*train_seed);
        if (!train_dynamics.empty()) t.config.dynamics = ParseDynamicsKind(train_dynamics);
      }
      if (train_epochs) t.config.epochs = *train_epochs;
      if (train_steps) t.config.max_steps = *train_steps;
      if (train_lr) t.config.lr = *train_lr;
      if (train_threads) t.config.threads = *train_threads;
      if (!train_device.empty()) t.config.device = train_device;
      PrintTrainSummary(Train(t));
      return 0;
    }
    if (app.got_subcommand("run")) {
      TrainOptions t;
      t.config = TrainConfig::FromToml(run_config);
      t.config.Validate();
      t.run_dir = run_out.empty()
                      ? std::filesystem::path("runs") / std::filesystem::path(run_config).stem()
                      : std::filesystem::path(run_out);
      const bool resume = std::filesystem::exists(t.run_dir / "checkpoints" / "last.pt");
      if (resume) {
        // The run continues with its saved config; only a longer schedule may be asked for.
        TrainConfig saved = TrainConfig::FromToml(t.run_dir / "config.toml");
        TrainConfig wanted = t.config;
        wanted.epochs = saved.epochs;
        wanted.max_steps = saved.max_steps;
        if (wanted.ToToml() != saved.ToToml()) {
          throw InputError("'" + t.run_dir.string() + "' was started with another " +
                           "configuration than '" + run_config + "': use --out for a new run");
        }
        saved.epochs = t.config.epochs;
        saved.max_steps = t.config.max_steps;
        t.config = saved;
      }
      const auto data_file = t.config.DataFile();
      if (t.config.data.empty() && (t.config.size % 4 != 0 ||
                                    t.config.frames < t.config.horizon + 2)) {
        throw InputError("[data] size must be a multiple of 4 and frames ≥ horizon + 2 = " +
                         std::to_string(t.config.horizon + 2) + " to train on the data set");
      }
      if (!std::filesystem::exists(data_file)) {
        if (!t.config.data.empty() && t.config.env.empty()) {
          throw IoError("data set not found: '" + data_file.string() + "'");
        }
        GenerateOptions g;
        g.env = ParseEnvName(t.config.env);
        g.control = ParseControlMode(t.config.control);
        g.size = t.config.size;
        g.runs = t.config.runs;
        g.frames = t.config.frames;
        g.seed = t.config.data_seed;
        g.out_dir = data_file.parent_path();
        g.gl = ParseGlBackend(gl_name);
        if (DatasetPath(g) != data_file) {
          throw InputError("[data] file '" + data_file.string() + "' does not exist and is not " +
                           "the name keycld generate gives ('" + DatasetPath(g).string() + "')");
        }
        GenerateResult r = GenerateDataset(g);
        std::printf("wrote %s in %.1f s (%.0f frames/s)\n", r.path.c_str(), r.seconds,
                    r.frames_per_second);
      } else {
        std::printf("using data set %s\n", data_file.c_str());
      }
      t.resume = resume;
      if (t.resume) std::printf("resuming the run in %s\n", t.run_dir.c_str());
      std::fflush(stdout);
      PrintTrainSummary(Train(t));
      return 0;
    }
    if (app.got_subcommand("render")) {
      Environment env(ParseEnvName(render_env));
      if (render_qpos.empty()) render_qpos.assign(env.nq(), 0.0);
      env.Reset(render_qpos, std::vector<double>(env.nv(), 0.0));
      auto gl = GlContext::Create(ParseGlBackend(gl_name));
      OffscreenRenderer renderer(env, *gl, render_size);
      std::vector<uint8_t> rgb(size_t(render_size) * render_size * 3);
      renderer.Render(env, rgb);
      WritePng(render_out, rgb, render_size, render_size);
      std::printf("wrote %s\n", render_out.c_str());
      return 0;
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
