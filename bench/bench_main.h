// The main() of the LibTorch benchmarks: the process set-up of the CLI (glibc's allocator tuned,
// keycld/util/allocator.h) unless --default-allocator is among the arguments (the "before"
// numbers), then Google Benchmark, which refuses unknown flags. Each benchmark fixes its own
// minimum time (MinTime), which takes precedence over --benchmark_min_time; use
// --benchmark_repetitions for more samples.
#pragma once

#include <benchmark/benchmark.h>

#include <string>

#include "keycld/util/allocator.h"

#define KEYCLD_BENCHMARK_MAIN_WITH_ALLOCATOR_CHOICE()                         \
  int main(int argc, char** argv) {                                           \
    bool tune = true;                                                         \
    int kept = 1;                                                             \
    for (int i = 1; i < argc; ++i) {                                          \
      if (std::string(argv[i]) == "--default-allocator") {                    \
        tune = false;                                                         \
      } else {                                                                \
        argv[kept++] = argv[i];                                               \
      }                                                                       \
    }                                                                         \
    argc = kept;                                                              \
    if (tune) keycld::TuneAllocatorForTraining();                             \
    benchmark::Initialize(&argc, argv);                                       \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;         \
    benchmark::RunSpecifiedBenchmarks();                                      \
    benchmark::Shutdown();                                                    \
    return 0;                                                                 \
  }
