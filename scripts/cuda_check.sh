#!/bin/bash
# `--device cuda` check on a GPU machine that has PyTorch with CUDA (its LibTorch), CMake, a
# C++20 compiler and the CUDA toolkit, but none of keycld's other dependencies: builds the
# LibTorch-only core (cmake -DKEYCLD_CORE_ONLY=ON: networks, dynamics, losses, prediction) and
# runs its tests, among them tests/device_test.cc (CUDA against CPU values; skipped without a
# GPU). GoogleTest: installed, or its source tree as the first argument
# (e.g. a copy of Debian's /usr/src/googletest).
# Usage: scripts/cuda_check.sh [GTEST_SOURCE_DIR] [BUILD_DIR]
set -euo pipefail
gtest_src=${1:-}
build=${2:-build-core}
args=(-DKEYCLD_CORE_ONLY=ON -DCMAKE_BUILD_TYPE=Release)
# PyTorch's LibTorch if python3 has torch, else the one CMake finds (e.g. Debian's libtorch-dev).
if torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2> /dev/null); then
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda,
        "devices", torch.cuda.device_count())'
  args+=(-DCMAKE_PREFIX_PATH="$torch_prefix")
fi
if [ -n "$gtest_src" ]; then
  [ -f "$gtest_src/CMakeLists.txt" ] || { echo "cuda_check.sh: '$gtest_src' is not a GoogleTest source tree (no CMakeLists.txt)" >&2; exit 1; }
  args+=(-DKEYCLD_GTEST_SOURCE_DIR="$(realpath "$gtest_src")")
else
  args+=(-DKEYCLD_GTEST_SOURCE_DIR=)  # an installed GoogleTest, also after an earlier run named a tree
fi
command -v ninja > /dev/null && args+=(-G Ninja)
cmake -S "$(dirname "$0")/.." -B "$build" "${args[@]}"
cmake --build "$build" -j"$(nproc)" -- -k 0 || cmake --build "$build" -j"$(nproc)"
"$build"/keycld_core_tests
