// Speed of data generation (docs/method.md §7 look: 64×64, shadow map 2048, 4× MSAA).
// Run: build/generate_bench   (frames/s are the items_per_second column)
#include <benchmark/benchmark.h>

#include <filesystem>

#include "keycld/data/generate.h"
#include "keycld/sim/offscreen_renderer.h"

namespace keycld {
namespace {

const EnvName kEnvs[] = {EnvName::kPendulum, EnvName::kCartpole, EnvName::kAcrobot};

// One physics step (no rendering).
void BM_PhysicsStep(benchmark::State& state) {
  Environment env(kEnvs[state.range(0)]);
  Rng rng(0, 1, 0);
  env.ResetRandom(rng);
  for (auto _ : state) env.Step();
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(EnvNameString(env.name()));
}
BENCHMARK(BM_PhysicsStep)->DenseRange(0, 2);

// One rendered frame on one thread (the per-core cost of generation).
void BM_RenderFrame(benchmark::State& state) {
  ::setenv("LP_NUM_THREADS", "0", 0);
  Environment env(kEnvs[state.range(0)]);
  auto gl = GlContext::Create(GlBackend::kAuto);
  const int size = int(state.range(1));
  OffscreenRenderer renderer(env, *gl, size);
  std::vector<uint8_t> rgb(size_t(size) * size * 3);
  Rng rng(0, 1, 0);
  env.ResetRandom(rng);
  for (auto _ : state) {
    env.Step();
    renderer.Render(env, rgb);
  }
  state.counters["frames/s"] =
      benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(EnvNameString(env.name()) + " " + gl->info().platform);
}
BENCHMARK(BM_RenderFrame)->ArgsProduct({{0, 1, 2}, {64}})->Unit(benchmark::kMillisecond);

// The whole pipeline: 40 runs × 50 frames, all cores, HDF5 with compression, grid included.
void BM_GenerateDataset(benchmark::State& state) {
  auto dir = std::filesystem::temp_directory_path() / "keycld-bench-generate";
  GenerateOptions o;
  o.env = kEnvs[state.range(0)];
  o.control = ControlMode::kNone;
  o.runs = 40;
  o.frames = 50;
  o.size = 64;
  o.out_dir = dir;
  o.force = true;
  o.progress = false;
  for (auto _ : state) GenerateDataset(o);
  std::filesystem::remove_all(dir);
  state.counters["frames/s"] = benchmark::Counter(double(state.iterations() * o.runs * o.frames),
                                                  benchmark::Counter::kIsRate);
  state.SetLabel(EnvNameString(o.env) + ", frames/s incl. startup and grid");
}
BENCHMARK(BM_GenerateDataset)
    ->DenseRange(0, 2)
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace keycld

BENCHMARK_MAIN();
