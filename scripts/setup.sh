#!/usr/bin/env bash
# Installs keycld's system dependencies (Debian 12 packages) and builds it into build/.
# Idempotent: rerunning skips installed packages and rebuilds only what changed.
# Environment: BUILD_DIR (default build), BUILD_TYPE (default Release), JOBS (default nproc),
#              KEYCLD_SKIP_APT=1 to skip the package step, CMAKE_ARGS for extra cmake options
#              (e.g. -DCMAKE_PREFIX_PATH=/opt/libtorch for an official CUDA LibTorch).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake pkg-config git
  libtorch-dev                        # tensors, autograd, nn, Adam (CPU build)
  libdnnl-dev                         # oneDNN headers: the fused U-Net training path (the
                                      # libdnnl2 LibTorch already links; docs/benchmarks.md)
  libopenblas0-pthread                # BLAS for LibTorch's matrix products (the baselines' MLPs:
                                      # 3.4-16x faster than the reference BLAS; docs/baselines.md)
  libgloo-dev                         # headers of LibTorch's c10d Gloo process group (distributed training)
  libmujoco-dev libqhull-dev          # physics and rendering (mujoco's cmake config needs qhull)
  libegl-dev libegl1 libegl-mesa0 libgl1-mesa-dri libgl-dev libosmesa6-dev  # headless GL: EGL (Mesa llvmpipe), OSMesa
  libhdf5-dev                         # data sets
  libcli11-dev libtomlplusplus-dev nlohmann-json3-dev  # CLI, configs, metrics
  libstb-dev libgif-dev               # PNG and GIF output
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev  # video import/export (FFmpeg)
  libplplot-dev plplot-driver-cairo   # plots (PNG through cairo)
  libgtest-dev libbenchmark-dev       # tests and benchmarks
  python3-dev python3-torch pybind11-dev python3-pybind11  # the Python module (import keycld)
  python3-numpy python3-pytest python3-h5py python3-matplotlib  # its tests and example
)

if [[ "${KEYCLD_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  else
    echo "setup: all system packages present"
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
echo "setup: built $BUILD_DIR/keycld"
