// Control-loop rate (docs/method.md §10): steps per second of one closed-loop step = render the
// camera frame + estimate the keypoints with the U-Net + energy-shaping control (∇V by
// autograd, B, tangent projection, pseudo-inverse) + one physics step. An untrained model of
// the right shapes (speed does not depend on the weights). Also the parts alone, and the same
// loop with Lag-caVAE's law in the angle of a lag-cavae / lag-vae model.
// Run: build/control_bench [--benchmark_filter=...]. Args: image size, hidden width h,
// environment (0 pendulum, 1 cartpole, 2 acrobot), LibTorch threads.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include "bench_main.h"
#include "keycld/control/closed_loop.h"
#include "keycld/sim/gl_context.h"

namespace keycld {
namespace {

EnvName Env(int64_t i) {
  return i == 0 ? EnvName::kPendulum : i == 1 ? EnvName::kCartpole : EnvName::kAcrobot;
}

struct Setup {
  explicit Setup(const benchmark::State& state)
      : env(Env(state.range(2))),
        gl(GlContext::Create(GlBackend::kAuto)),
        renderer(env, *gl, int(state.range(0))),
        net(CreateModel(Spec(state))),
        model(net) {
    torch::set_num_threads(int(state.range(3)));
    target =
        TargetFromState(env, renderer, model, std::vector<double>(size_t(env.nq()), 0.0)).keypoints;
    env.Reset(DefaultInitialState(env.name()), std::vector<double>(size_t(env.nv()), 0.0));
  }
  static ModelSpec Spec(const benchmark::State& state) {
    torch::manual_seed(0);
    ModelSpec spec;
    spec.env = Env(state.range(2));
    spec.num_keypoints = KeypointCount(spec.env);
    spec.action_dim = spec.env == EnvName::kPendulum ? 1 : 2;
    spec.image_size = int(state.range(0));
    spec.hidden = int(state.range(1));
    return spec;
  }
  std::string Label(const benchmark::State& state) const {
    return EnvNameString(env.name()) + " " + std::to_string(state.range(0)) +
           "px h=" + std::to_string(state.range(1)) + " threads=" + std::to_string(state.range(3));
  }
  Environment env;
  std::unique_ptr<GlContext> gl;
  OffscreenRenderer renderer;
  Model net;
  LearnedControlModel model;
  torch::Tensor target;
};

void BM_ControlStep(benchmark::State& state) {
  Setup s(state);
  EnergyShapingController controller(s.model, s.target, ControllerOptions{.u_max = 2.0});
  ClosedLoop loop(s.env, s.renderer, s.model, controller);
  for (auto _ : state) benchmark::DoNotOptimize(loop.Step());
  state.counters["steps/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(s.Label(state));
}

void BM_Render(benchmark::State& state) {
  Setup s(state);
  std::vector<uint8_t> rgb(size_t(state.range(0)) * state.range(0) * 3);
  for (auto _ : state) s.renderer.Render(s.env, rgb);
  state.SetLabel(s.Label(state));
}

void BM_EstimateKeypoints(benchmark::State& state) {
  Setup s(state);
  std::vector<uint8_t> rgb(size_t(state.range(0)) * state.range(0) * 3);
  s.renderer.Render(s.env, rgb);
  for (auto _ : state) benchmark::DoNotOptimize(s.model.EstimateKeypoints(rgb));
  state.SetLabel(s.Label(state));
}

void BM_ControllerAct(benchmark::State& state) {
  Setup s(state);
  EnergyShapingController controller(s.model, s.target, ControllerOptions{});
  auto x = s.target + 0.05;
  auto xdot = torch::full_like(x, 0.1);
  for (auto _ : state) benchmark::DoNotOptimize(controller.Act(x, xdot));
  state.SetLabel(s.Label(state));
}

// Lag-caVAE's law in its angle (angle_control.h) with an untrained lag-cavae or lag-vae
// pendulum model: render + MLP encoder + the law (∂V/∂q by autograd) + one physics step. Args:
// image size, 1 = lag-cavae / 0 = lag-vae, LibTorch threads.
void BM_AngleControlStep(benchmark::State& state) {
  torch::set_num_threads(int(state.range(2)));
  torch::manual_seed(0);
  ModelSpec spec;
  spec.env = EnvName::kPendulum;
  spec.num_keypoints = 1;
  spec.action_dim = 1;
  spec.image_size = int(state.range(0));
  spec.model = state.range(1) ? "lag-cavae" : "lag-vae";
  Environment env(EnvName::kPendulum);
  auto gl = GlContext::Create(GlBackend::kAuto);
  OffscreenRenderer renderer(env, *gl, spec.image_size);
  LearnedAngleControlModel model(CreateModel(spec));
  const double target = TargetFromState(env, renderer, model, {0.0}).keypoints.item<double>();
  env.Reset(DefaultInitialState(EnvName::kPendulum), std::vector<double>{0.0});
  AngleEnergyShapingController law(model, {target}, ControllerOptions{.u_max = 2.0});
  AngleFrameController controller(model, law);
  ClosedLoop loop(env, renderer, controller);
  for (auto _ : state) benchmark::DoNotOptimize(loop.Step());
  state.counters["steps/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(spec.model + " pendulum " + std::to_string(spec.image_size) +
                 "px threads=" + std::to_string(state.range(2)));
}

// Every system at the CPU preset's size (32 px, h = 16), at 64 px with the same width (what the
// cartpole and acrobot presets train at) and at the paper's setting (64 px, h = 32), one thread;
// two threads at 32 and 64 px for the pendulum and at the paper's setting for the acrobot.
#define KEYCLD_CONTROL_ARGS                                                             \
  ->ArgsProduct({{32}, {16}, {0, 1, 2}, {1}})                                           \
      ->ArgsProduct({{64}, {16, 32}, {0, 1, 2}, {1}})                                   \
      ->Args({32, 16, 0, 2})                                                            \
      ->Args({64, 32, 0, 2})                                                            \
      ->Args({64, 32, 2, 2})                                                            \
      ->Unit(benchmark::kMillisecond)                                                   \
      ->UseRealTime()

BENCHMARK(BM_ControlStep) KEYCLD_CONTROL_ARGS->MinTime(3.0);
BENCHMARK(BM_Render) KEYCLD_CONTROL_ARGS->MinTime(1.0);
BENCHMARK(BM_EstimateKeypoints) KEYCLD_CONTROL_ARGS->MinTime(1.0);
BENCHMARK(BM_AngleControlStep)
    ->Args({32, 1, 1})
    ->Args({32, 0, 1})
    ->Args({64, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(3.0);
BENCHMARK(BM_ControllerAct)
    ->Args({32, 16, 0, 1})
    ->Args({32, 16, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

}  // namespace
}  // namespace keycld

KEYCLD_BENCHMARK_MAIN_WITH_ALLOCATOR_CHOICE()
