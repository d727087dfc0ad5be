// keycld info | generate | render: the simulator, the renderer and the data sets.
#include <torch/torch.h>

#include <cstdio>
#include <thread>

#include "commands.h"
#include "keycld/data/generate.h"
#include "keycld/data/video_io.h"
#include "keycld/dynamics/constraints.h"
#include "keycld/sim/gl_context.h"
#include "keycld/sim/offscreen_renderer.h"
#include "keycld/util/error.h"
#include "keycld/util/image_io.h"

namespace keycld::cli {

Runner AddInfoCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  app.add_subcommand("info", "Print versions, threads, devices and the GL backend chosen");
  return [global] {
    std::printf("keycld %s\n", KEYCLD_VERSION);
    std::printf("LibTorch %s (threads: %d intra-op, %u cores)\n", TORCH_VERSION,
                torch::get_num_threads(), std::thread::hardware_concurrency());
    std::printf("CUDA available: %s", torch::cuda::is_available() ? "yes" : "no");
    if (torch::cuda::is_available()) std::printf(" (%zu devices)", torch::cuda::device_count());
    std::printf("\nMuJoCo %s\n", MujocoVersion().c_str());
    std::printf("FFmpeg %s\n", FfmpegVersion().c_str());
    std::printf("assets: %s\n", DefaultAssetsDir().c_str());
    std::vector<std::string> attempts;
    auto gl = GlContext::Create(ParseGlBackend(global->gl), &attempts);
    for (const auto& a : attempts) std::printf("GL attempt failed: %s\n", a.c_str());
    const GlInfo& i = gl->info();
    std::printf("GL backend: %s via %s\nGL vendor: %s\nGL renderer: %s\nGL version: %s\n",
                GlBackendName(i.backend).c_str(), i.platform.c_str(), i.vendor.c_str(),
                i.renderer.c_str(), i.version.c_str());
    return 0;
  };
}

namespace {
struct GenerateArgs {
  GenerateOptions gen;
  std::string env = "pendulum", control = "none", out_dir = "data", system;
  int64_t seed = 0;
};

// --env NAME or --system FILE (a description file, docs/systems.md; a built-in name works too).
SystemDescription ChosenSystem(const std::string& env, const std::string& system,
                               const CLI::App& cmd) {
  if (!system.empty()) {
    if (cmd.count("--env") > 0) throw InputError("give --env or --system, not both");
    return LoadSystemByName(system);
  }
  return BuiltinSystem(ParseEnvName(env));
}
}  // namespace

Runner AddGenerateCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand("generate", "Generate a KeyCLD data set (HDF5)");
  cmd->add_option("--env", a->env, "pendulum | cartpole | acrobot")->capture_default_str();
  cmd->add_option("--system", a->system,
                  "A system description file (TOML, docs/systems.md) instead of --env");
  cmd->add_option("--control", a->control, "none | under | full")->capture_default_str();
  cmd->add_option("--runs", a->gen.runs, "Number of runs (the last 10% are validation)")
      ->capture_default_str();
  cmd->add_option("--frames", a->gen.frames, "Frames per run")->capture_default_str();
  cmd->add_option("--size", a->gen.size, "Image side in pixels")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Random seed of the whole data set (≥ 0)")
      ->capture_default_str();
  cmd->add_option("--workers", a->gen.workers, "Render processes (0 = one per core)")
      ->capture_default_str();
  cmd->add_option("--out", a->out_dir, "Output folder")->capture_default_str();
  cmd->add_flag("--force", a->gen.force, "Regenerate even if the file exists");
  return [a, global, cmd] {
    GenerateOptions gen = a->gen;
    SystemDescription system = ChosenSystem(a->env, a->system, *cmd);
    if (system.builtin) {
      gen.env = *system.builtin;
    } else {
      gen.system = system;
    }
    gen.control = ParseControlMode(a->control);
    gen.out_dir = a->out_dir;
    if (a->seed < 0) throw InputError("--seed must be ≥ 0, got " + std::to_string(a->seed));
    gen.seed = uint64_t(a->seed);
    gen.gl = ParseGlBackend(global->gl);
    GenerateResult r = GenerateDataset(gen);
    if (r.reused) {
      std::printf("reusing existing data set %s (same parameters; --force regenerates)\n",
                  r.path.c_str());
    } else {
      std::printf(
          "wrote %s: %d runs x %d frames at %dx%d in %.1f s (%.0f frames/s), "
          "VPT threshold eps = %.6f\n",
          r.path.c_str(), r.info.runs, r.info.frames, r.info.size, r.info.size, r.seconds,
          r.frames_per_second, r.info.vpt_epsilon);
    }
    if (gen.system) {
      const SystemDescription resolved = DatasetSystem(r.info);
      std::printf("%s: %d keypoint(s), constraints: %s\n", resolved.name.c_str(),
                  resolved.num_keypoints(),
                  HolonomicConstraints(resolved.num_keypoints(), resolved.ConstraintTerms())
                      .Describe()
                      .c_str());
    }
    return 0;
  };
}

namespace {
struct RenderArgs {
  std::string env = "pendulum", out = "frame.png", system;
  std::vector<double> qpos;
  int size = 256;
};
}  // namespace

Runner AddRenderCommand(CLI::App& app, std::shared_ptr<const GlobalOptions> global) {
  auto a = std::make_shared<RenderArgs>();
  auto* cmd = app.add_subcommand("render", "Render one state of a system to a PNG");
  cmd->add_option("--env", a->env, "pendulum | cartpole | acrobot")->capture_default_str();
  cmd->add_option("--system", a->system,
                  "A system description file (TOML, docs/systems.md) instead of --env");
  cmd->add_option("--qpos", a->qpos, "Joint positions (rad / m); default all zero");
  cmd->add_option("--size", a->size, "Image side in pixels")->capture_default_str();
  cmd->add_option("--out", a->out, "PNG file")->capture_default_str();
  return [a, global, cmd] {
    Environment env(ChosenSystem(a->env, a->system, *cmd));
    std::vector<double> qpos = a->qpos;
    if (qpos.empty()) qpos.assign(env.nq(), 0.0);
    env.Reset(qpos, std::vector<double>(env.nv(), 0.0));
    auto gl = GlContext::Create(ParseGlBackend(global->gl));
    OffscreenRenderer renderer(env, *gl, a->size);
    std::vector<uint8_t> rgb(size_t(a->size) * a->size * 3);
    renderer.Render(env, rgb);
    WritePng(a->out, rgb, a->size, a->size);
    std::printf("wrote %s\n", a->out.c_str());
    return 0;
  };
}

}  // namespace keycld::cli
