#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a GPU and the CUDA toolkit, CMake and ninja but
# no MPI, apt or network (the lent H200): configure with CUDA against the packages that
# scripts/pack-device-deps.sh unpacked into .device-deps/ (no MPI, no viewer, the reference
# BLAS), build the CLI and the CUDA tests, run them, then a short benchmark and a traced ring
# on virtual ranks. About 5 minutes on one H200, most of it the build.
#
# Usage: scripts/gpu-check.sh [OUT_DIR]        (logs and the trace go there; default out/gpu-check)
# From the session: device run(command="scripts/gpu-check.sh $OUT", carry=[".device-deps"]).
set -uo pipefail
cd "$(dirname "$0")/.."
DEPS=$PWD/.device-deps
OUT=${1:-out/gpu-check}
BUILD=${RINGSIDE_GPU_BUILD:-build-gpu}
mkdir -p "$OUT"
[[ -d $DEPS/usr ]] || { echo "gpu-check: no $DEPS: run scripts/pack-device-deps.sh first (on a machine with apt)" >&2; exit 1; }
# A GPU first: without one every check below would be skipped or fail, after minutes of build.
if ! nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | grep .; then
  echo "gpu-check: no NVIDIA GPU visible (nvidia-smi lists none): this script checks the CUDA backend on one" >&2
  exit 2
fi
failed=0
step() {  # step NAME COMMAND...: runs it, logs to $OUT/NAME.log, remembers a failure
  local name=$1
  shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: rc $rc, $((SECONDS - t0)) s"
  ((rc == 0)) || failed=1
  return "$rc"
}

step configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGSIDE_CUDA=ON -DRINGSIDE_MPI=OFF \
  -DRINGSIDE_VIEWER=OFF -DRINGSIDE_CPU_TESTS=OFF -DRINGSIDE_BLAS=reference -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$DEPS/usr" || exit 1
step build cmake --build "$BUILD" -j "$(nproc)" --target ringside ringside_cuda_tests ringside_cuda_emulated_tests || exit 1
# The GPU tests (kernels against the CPU, every strategy on P = 2, 4, 8 virtual ranks against
# fp64, dropout masks, the CUDA timeline, NCCL when there are 2+ GPUs) and the emulated kernels.
step ctest ctest --test-dir "$BUILD" --output-on-failure --timeout 300
# CTest counts a skipped test as passed: on this GPU machine only NCCL may skip (one GPU).
if grep "(Skipped)" "$OUT/ctest.log" | grep -v -i nccl; then
  echo "gpu-check: GPU tests were SKIPPED on a machine with a GPU: the device was not usable" >&2
  failed=1
fi
step compare "$BUILD/ringside" compare --device cuda --ranks 4 --seq 512 --hidden 256 --heads 8 --ffn 1024
step compare-llama "$BUILD/ringside" compare --device cuda --ranks 4 --seq 512 --hidden 256 --heads 8 --ffn 1024 \
  --norm rmsnorm --mlp swiglu --no-bias
step ring "$BUILD/ringside" run --strategy ring --device cuda --ranks 4 --seq 16384 --hidden 2048 --heads 16 \
  --ffn 8192 --batch 1 --trace "$OUT/ring-cuda.trace.json"
step bench "$BUILD/ringside" bench cuda
echo "gpu-check: $([[ $failed == 0 ]] && echo "all steps passed" || echo "SOME STEPS FAILED"); logs in $OUT"
exit $failed
