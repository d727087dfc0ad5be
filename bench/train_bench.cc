// Seconds per training step (one sequence: forward, backward, clip, Adam), docs/method.md §6, with
// frames/s and the achieved GFLOP/s against TrainingStepFlops (the estimator's and renderer's
// convolutions, forward + both backward products; 172.0 GFLOP per 50-frame sequence at the
// paper setting, 10.9 GFLOP at the CPU preset).
// Run: build/train_bench [--benchmark_filter=...]; the threads argument is LibTorch's
// intra-op thread count.
#include <benchmark/benchmark.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <array>
#include <cstdio>
#include <cstdlib>

#include "bench_main.h"
#include "keycld/models/keypoint_model.h"
#include "keycld/models/registry.h"
#include "keycld/train/loss.h"
#include "keycld/train/vpt.h"

namespace keycld {
namespace {

// Args: image size, hidden width h, frames N, environment (0 pendulum, 1 cartpole), threads,
// model (0 keycld, 1 keycld-nc, 2 node2), precision (0 fp32, 1 bf16 autocast), U-Net kernels
// (0 libtorch, 1 onednn, 2 winograd; model/onednn_unet.h), the dynamics loss's integrator
// (0 the paper's explicit Euler, 1 RK4 with the cpu-quick presets' max_acceleration 1000),
// the dynamics loss's horizon P (4 the paper's; 16 the main job's after its epoch 8).
// The loss options of integrator argument `which` (0 euler, 1 rk4 as the cpu-quick presets) and
// horizon P.
LossOptions BenchLossOptions(int64_t which, int64_t horizon) {
  LossOptions options;
  options.horizon = int(horizon);
  if (which == 1) {
    options.integrator = IntegratorMethod::kRk4;
    options.max_acceleration = 1000.0;
  }
  return options;
}

void BM_TrainStep(benchmark::State& state) {
  torch::set_num_threads(int(state.range(4)));
  torch::manual_seed(0);
  ModelSpec spec;
  spec.env = state.range(3) == 0 ? EnvName::kPendulum : EnvName::kCartpole;
  spec.num_keypoints = KeypointCount(spec.env);
  spec.action_dim = spec.env == EnvName::kPendulum ? 1 : 2;
  spec.image_size = int(state.range(0));
  spec.hidden = int(state.range(1));
  spec.dt = 0.02;
  spec.model = ModelVariantNames()[state.range(5)];
  Model model = CreateModel(spec);
  const Precision precision = state.range(6) ? Precision::kBfloat16 : Precision::kFloat32;
  if (precision == Precision::kBfloat16 && !HasNativeBf16(torch::kCPU)) {
    state.SkipWithError("no native bf16 on this CPU");
    return;
  }
  model->SetPrecision(precision);
  const TrunkKernels kernels = TrunkKernels(state.range(7));
  if (kernels != TrunkKernels::kLibTorch && !OneDnnUNetBuilt()) {
    state.SkipWithError("built without oneDNN");
    return;
  }
  model->SetTrunkKernels(kernels);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(model->PerceptionParameters(),
                      std::make_unique<torch::optim::AdamOptions>(3e-4));
  groups.emplace_back(model->DynamicsParameters(),
                      std::make_unique<torch::optim::AdamOptions>(6e-5));
  torch::optim::Adam adam(std::move(groups), torch::optim::AdamOptions(3e-4));
  const int64_t N = state.range(2), S = spec.image_size;
  torch::Tensor images = torch::rand({N, 3, S, S});
  torch::Tensor u = torch::zeros({spec.action_dim});
  torch::Tensor ids = torch::randint(0, 8, {N}, torch::kInt64);
  const LossOptions options = BenchLossOptions(state.range(8), state.range(9));
  auto step = [&] {
    LossTerms loss = SequenceLoss(model, images, u, ids, options);
    adam.zero_grad();
    loss.total.backward();
    for (auto& p : model->parameters())
      if (p.grad().defined()) p.grad().clamp_(-5, 5);
    adam.step();
  };
  step();  // warm-up: oneDNN primitive creation and first-touch of the activation buffers
  // KEYCLD_UNET_PROFILE=1: the fused U-Net's time per part, printed after the case.
  const bool profile = std::getenv("KEYCLD_UNET_PROFILE") != nullptr;
  if (profile) SetUNetProfiling(true);
  if (const char* trace = std::getenv("KEYCLD_TORCH_PROFILE")) {
    // LibTorch's operator profiler over 10 steps, a chrome://tracing file (summed per operator
    // by bench/trace_summary.py).
    torch::autograd::profiler::RecordProfile record{std::string(trace)};
    for (int i = 0; i < 10; ++i) step();
  }
  for (auto _ : state) step();
  if (profile) {
    const double steps = double(state.iterations());
    for (const UNetProfileEntry& e : UNetProfile()) {
      std::printf("  %-50s %8.2f ms/step  %5.1f calls/step\n", e.part.c_str(),
                  1e3 * e.seconds / steps, double(e.calls) / steps);
    }
    SetUNetProfiling(false);
  }
  const double flops = TrainingStepFlops(spec, N);
  state.counters["frames/s"] =
      benchmark::Counter(double(N) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/step"] = flops * 1e-9;
  state.SetLabel(spec.model + " " + EnvNameString(spec.env) + " " + std::to_string(S) +
                 "px h=" + std::to_string(spec.hidden) + " N=" + std::to_string(N) +
                 " threads=" + std::to_string(state.range(4)) + " " + PrecisionName(precision) +
                 " " + NameOf(kernels) + " " + IntegratorMethodString(options.integrator) +
                 " P=" + std::to_string(options.horizon));
}
BENCHMARK(BM_TrainStep)
    ->Args({64, 32, 50, 0, 2, 0, 0, 2, 0, 4})  // the paper's setting (default kernels: Winograd)
    ->Args({64, 32, 50, 0, 2, 0, 0, 1, 0, 4})  // fused oneDNN U-Net, direct convolutions
    ->Args({64, 32, 50, 0, 2, 0, 0, 0, 0, 4})  // LibTorch's modules
    ->Args({64, 32, 50, 0, 1, 0, 0, 2, 0, 4})
    ->Args({64, 32, 50, 0, 2, 0, 1, 0, 0, 4})  // bf16 (autocast: LibTorch's modules)
    ->Args({32, 16, 50, 0, 2, 0, 0, 2, 0, 4})  // CPU quick preset, each variant
    ->Args({32, 16, 50, 0, 2, 0, 0, 2, 1, 4})  // ... with RK4, the main job's loss after epoch 3
    ->Args({32, 16, 50, 0, 2, 0, 0, 1, 0, 4})
    ->Args({32, 16, 50, 0, 2, 0, 0, 0, 0, 4})
    ->Args({32, 16, 50, 0, 2, 1, 0, 2, 0, 4})
    ->Args({32, 16, 50, 0, 2, 2, 0, 2, 0, 4})
    ->Args({32, 16, 50, 0, 2, 0, 1, 0, 0, 4})  // bf16
    ->Args({32, 16, 50, 1, 2, 0, 0, 2, 0, 4})
    ->Args({32, 16, 50, 1, 2, 1, 0, 2, 0, 4})
    ->Args({32, 16, 50, 1, 2, 2, 0, 2, 0, 4})
    ->Args({64, 16, 50, 0, 2, 0, 0, 2, 0, 4})  // 64 px, h = 16
    ->Args({64, 16, 50, 0, 2, 0, 0, 2, 1, 4})  // the main job after its epoch 3 (RK4)
    ->Args({64, 16, 50, 0, 2, 0, 0, 2, 1, 16})  // ... and after its epoch 8 (P = 16)
    ->Args({64, 16, 50, 0, 2, 0, 0, 0, 0, 4})
    ->Args({64, 8, 50, 0, 2, 0, 0, 2, 0, 4})  // 64 px, h = 8
    ->Args({64, 8, 50, 0, 2, 0, 0, 0, 0, 4})
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->MinTime(5.0);

// The dynamics term alone (DynamicsLoss, forward and backward into the keypoints and the
// dynamics weights) for 50 frames of random keypoints: the part of the step that is many small
// operations. Args: environment (0 pendulum, 1 cartpole, 2 acrobot), integrator (as above),
// threads.
void BM_DynamicsLoss(benchmark::State& state) {
  torch::set_num_threads(int(state.range(2)));
  torch::manual_seed(0);
  ModelSpec spec;
  spec.env = std::array{EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot}[state.range(0)];
  spec.num_keypoints = KeypointCount(spec.env);
  spec.action_dim = spec.env == EnvName::kPendulum ? 1 : 2;
  spec.image_size = 32;
  spec.hidden = 16;
  spec.dt = 0.02;
  Model model = CreateModel(spec);
  const LossOptions options = BenchLossOptions(state.range(1), 4);
  const torch::Tensor leaf = (torch::rand({50, 2 * spec.num_keypoints}) - 0.5).requires_grad_();
  const torch::Tensor u = torch::zeros({spec.action_dim});
  auto step = [&] {
    DynamicsLoss(model, leaf, u, options).backward();
    leaf.mutable_grad().reset();
    model->zero_grad();
  };
  step();
  for (auto _ : state) step();
  state.SetLabel(EnvNameString(spec.env) + " " + IntegratorMethodString(options.integrator) +
                 " threads=" + std::to_string(state.range(2)));
}
BENCHMARK(BM_DynamicsLoss)
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace keycld

KEYCLD_BENCHMARK_MAIN_WITH_ALLOCATOR_CHOICE()
