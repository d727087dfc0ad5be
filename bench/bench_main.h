// The main() of the LibTorch benchmarks: the process set-up of the CLI (glibc's allocator tuned,
// keycld/util/allocator.h) unless the last argument is --default-allocator (the "before"
// numbers), then Google Benchmark.
#pragma once

#include <benchmark/benchmark.h>

#include <string>

#include "keycld/util/allocator.h"

#define KEYCLD_BENCHMARK_MAIN_WITH_ALLOCATOR_CHOICE()                           \
  int main(int argc, char** argv) {                                             \
    if (!(argc > 1 && std::string(argv[argc - 1]) == "--default-allocator")) { \
      keycld::TuneAllocatorForTraining();                                       \
    } else {                                                                    \
      --argc;                                                                   \
    }                                                                           \
    benchmark::Initialize(&argc, argv);                                         \
    benchmark::RunSpecifiedBenchmarks();                                        \
    benchmark::Shutdown();                                                      \
    return 0;                                                                   \
  }
