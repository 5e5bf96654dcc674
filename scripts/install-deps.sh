#!/usr/bin/env bash
# Installs every Debian 12 package ringside needs. Idempotent: when everything is
# already present it only runs dpkg-query and exits (well under a second).
# Uses sudo when not root. Set RINGSIDE_DEPS_QUIET=1 to silence the "all present" line.
set -euo pipefail

PACKAGES=(
  # build
  cmake ninja-build g++ make pkg-config ccache
  # math and numerics
  libopenblas-dev librandom123-dev
  # communication (MPI backend; NCCL comes with the CUDA toolkit when present)
  openmpi-bin libopenmpi-dev
  # command line, JSON, tests, benchmarks
  libcli11-dev nlohmann-json3-dev catch2 libbenchmark-dev
  # gzipped traces (PyTorch's profiler writes .pt.trace.json.gz)
  zlib1g-dev
  # clang with libFuzzer: the trace reader is fuzzed in the tests
  clang libclang-rt-14-dev
  # an independent NumPy forward checks the reference's dump (tests/numpy_forward.py)
  python3 python3-numpy
  # viewer: Dear ImGui with GLFW + OpenGL 3, stb_image_write for screenshots, Xvfb for headless tests
  libimgui-dev libglfw3-dev libgl-dev libstb-dev xvfb xauth
)

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  [[ "${RINGSIDE_DEPS_QUIET:-0}" == 1 ]] || echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
