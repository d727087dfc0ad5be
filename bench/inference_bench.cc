// Inference speed: keypoint estimation of one frame (latency) and of a batch (throughput),
// docs/method.md §3, and a 500-frame Dormand–Prince rollout of the learned dynamics in float64
// (docs/method.md §5, §8: the VPT prediction). Untrained models of the right shapes: the
// estimator's cost does not depend on its weights; the rollout's step count does (a trained model's
// learned dynamics may need more steps), so it reports steps per rollout next to the time. Run:
// build/inference_bench [--benchmark_filter=...] [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "bench_main.h"
#include "keycld/dynamics/integrators.h"
#include "keycld/models/registry.h"
#include "keycld/train/vpt.h"

namespace keycld {
namespace {

ModelSpec Spec(int64_t size, int64_t hidden, EnvName env) {
  ModelSpec spec;
  spec.env = env;
  spec.num_keypoints = KeypointCount(env);
  spec.action_dim = env == EnvName::kPendulum ? 1 : 2;
  spec.image_size = int(size);
  spec.hidden = int(hidden);
  spec.dt = env == EnvName::kPendulum ? 0.02 : 0.01;
  return spec;
}

// Args: image size, hidden width h, batch (frames per call), LibTorch threads.
void BM_EstimateKeypoints(benchmark::State& state) {
  torch::set_num_threads(int(state.range(3)));
  torch::manual_seed(0);
  const ModelSpec spec = Spec(state.range(0), state.range(1), EnvName::kPendulum);
  Model model = CreateModel(spec);
  model->eval();
  const int64_t B = state.range(2), S = spec.image_size;
  torch::Tensor images = torch::rand({B, 3, S, S});
  c10::InferenceMode inference;
  model->Encode(images);  // warm-up: oneDNN primitive creation, first-touch of the buffers
  for (auto _ : state) {
    torch::Tensor keypoints = model->Encode(images).keypoints;
    benchmark::DoNotOptimize(keypoints.data_ptr<float>());
  }
  state.counters["frames/s"] =
      benchmark::Counter(double(B) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(S) + "px h=" + std::to_string(spec.hidden) +
                 " batch=" + std::to_string(B) + " threads=" + std::to_string(state.range(3)));
}
BENCHMARK(BM_EstimateKeypoints)
    ->Args({64, 32, 1, 1})  // the paper's size, one frame (latency)
    ->Args({64, 32, 1, 2})
    ->Args({64, 32, 50, 2})  // one sequence (throughput)
    ->Args({32, 16, 1, 1})   // CPU preset
    ->Args({32, 16, 50, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

// Args: environment (0 pendulum, 1 cartpole), runs in the batch, LibTorch threads.
void BM_Rollout500Dopri5(benchmark::State& state) {
  torch::set_num_threads(int(state.range(2)));
  torch::manual_seed(0);
  const EnvName env = state.range(0) == 0 ? EnvName::kPendulum : EnvName::kCartpole;
  const ModelSpec spec = Spec(32, 16, env);
  Model model = CreateModel(spec);
  DoublePrecisionDynamics fp64(model);
  const int64_t R = state.range(1), K = spec.num_keypoints;
  // Three frames of a swinging system on its constraints (pendulum: tip on a circle of radius
  // 0.5 about the image centre; cartpole: cart on y = 0, tip 0.5 away), as the estimator would
  // give them; the start state is built like the VPT prediction's.
  torch::Tensor x = torch::zeros({R, 3, 2 * K}, torch::kFloat64);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t f = 0; f < 3; ++f) {
      const double theta = 0.3 + 0.1 * double(r) + 0.05 * double(f);
      const double cart = env == EnvName::kPendulum ? 0.0 : 0.02 * double(f);
      int64_t c = 0;
      if (env != EnvName::kPendulum) {
        x[r][f][c++] = cart;
        x[r][f][c++] = 0.0;
      }
      x[r][f][c++] = cart + 0.5 * std::sin(theta);
      x[r][f][c++] = -0.5 * std::cos(theta);
    }
  }
  torch::NoGradGuard no_grad;
  const PhaseState start = InitialStateFromEstimates(model, x);
  std::vector<double> times(500);
  for (size_t i = 0; i < times.size(); ++i) times[i] = double(i) * spec.dt;
  torch::Tensor u = torch::zeros({R, spec.action_dim}, torch::kFloat64);
  IntegratorOptions options;  // rtol = atol = 1.4e-8 (docs/method.md §5)
  int64_t steps = 0;
  for (auto _ : state) {
    Trajectory t =
        model->Rollout(start.x, start.xdot, u, times, IntegratorMethod::kDopri5, options);
    steps = t.accepted_steps + t.rejected_steps;
    benchmark::DoNotOptimize(t.x.data_ptr<double>());
  }
  state.counters["frames/s"] = benchmark::Counter(
      double(R) * double(times.size()) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["steps"] = double(steps);
  state.SetLabel(EnvNameString(env) + " runs=" + std::to_string(R) +
                 " threads=" + std::to_string(state.range(2)));
}
BENCHMARK(BM_Rollout500Dopri5)
    ->Args({0, 1, 1})
    ->Args({0, 10, 2})  // the batch the evaluation uses
    ->Args({1, 1, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace keycld

KEYCLD_BENCHMARK_MAIN_WITH_ALLOCATOR_CHOICE()
