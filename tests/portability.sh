#!/usr/bin/env bash
# The whole suite under each condition that could make a test depend on the machine it runs on
# (issue 36): a forced vector path, OpenBLAS kernel sets, the libm of a CPU without FMA (glibc
# picks its exp, log, pow, sin and cos by the CPU; GLIBC_TUNABLES masks the features it looks
# at), all three at once as on a CPU of 2008, a CPU Debian's OpenBLAS does not recognise (issue
# 58: it loads its generic Prescott kernels, ringside must choose the CPU's own; there the
# benchmarks must also reach their targets, against the best sgemm), one core, and a loaded
# machine. Every line must
# be PASS, or SKIP where this CPU cannot run the condition. Not part of `make test` (it runs the
# suite eleven times, about 50 minutes on 2 cores); after a build:
#
#   tests/portability.sh [BUILD_DIR] [CONDITION...]     (default: build, every condition)
#
# Prints one line per condition, keeps each run's log in BUILD_DIR/portability/, and exits 1
# if any condition failed. A condition this CPU cannot run (AVX2 on an SSE-only CPU) is SKIP.
# (The script is one function, read whole before it runs: editing it meanwhile changes nothing.)
set -u
main() {
  cd "$(dirname "$0")/.." || exit 2
  BUILD=${1:-build}
  shift $(($# > 0 ? 1 : 0))
  [[ -f "$BUILD/CTestTestfile.cmake" ]] || { echo "portability.sh: no build in $BUILD (make build first)" >&2; exit 2; }
  LOGS="$BUILD/portability"
  mkdir -p "$LOGS"

  # name | environment | command prefix | busy loops beside the suite
  CONDITIONS=(
    "isa-avx2|RINGSIDE_CPU_ISA=avx2||0"
    "isa-generic|RINGSIDE_CPU_ISA=generic||0"
    "blas-haswell|OPENBLAS_CORETYPE=Haswell||0"
    "blas-zen|OPENBLAS_CORETYPE=Zen||0"
    "blas-prescott|OPENBLAS_CORETYPE=Prescott||0"
    "blas-unrecognised|RINGSIDE_OPENBLAS_FALLBACK=1||0"
    "libm-sse2|GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA||0"
    "old-cpu|RINGSIDE_CPU_ISA=generic OPENBLAS_CORETYPE=Nehalem GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2,-FMA||0"
    "one-core||taskset -c 0|0"
    "loaded|||2"
    "isa-avx2-loaded|RINGSIDE_CPU_ISA=avx2||2"
  )
  known=" ${CONDITIONS[*]%%|*} "
  for name in "$@"; do
    [[ "$known" == *" $name "* ]] || { echo "portability.sh: no condition '$name' (there are:${known% })" >&2; exit 2; }
  done
  has_avx2() { grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; }

  busy=()
  stop_busy() {
    ((${#busy[@]})) && kill "${busy[@]}" 2>/dev/null
    wait "${busy[@]}" 2>/dev/null
    busy=()
  }
  trap stop_busy EXIT

  failed=0
  for c in "${CONDITIONS[@]}"; do
    IFS='|' read -r name environment prefix loops <<<"$c"
    if (($#)) && [[ " $* " != *" $name "* ]]; then continue; fi
    shown="${environment:-${prefix:-}}"
    ((loops)) && shown="${shown:+$shown, }$loops busy loops beside ctest -j2"
    if [[ "$environment$name" == *avx2* || "$environment" == *Haswell* || "$environment" == *Zen* ]] && ! has_avx2; then
      printf 'SKIP  %-16s %-52s this CPU has no AVX2 and FMA\n' "$name" "$shown"
      continue
    fi
    for ((i = 0; i < loops; i++)); do
      (while :; do :; done) &
      busy+=($!)
    done
    start=$(date +%s)
    # shellcheck disable=SC2086
    env $environment $prefix ctest --test-dir "$BUILD" -j 2 --output-on-failure > "$LOGS/$name.log" 2>&1
    rc=$?
    stop_busy
    seconds=$(($(date +%s) - start))
    log="$LOGS/$name.log"
    summary=$(grep -Eo '[0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
    total=$(sed -E 's/.* out of ([0-9]+)/\1/' <<<"$summary")
    nfailed=$(sed -E 's/([0-9]+) tests failed.*/\1/' <<<"$summary")
    # Tests that did not run, but for the GPU's (which need a GPU, not a kind of CPU).
    skipped=$(sed -n '/The following tests did not run:/,/^$/p' "$log" | grep -E '^\s+[0-9]+ - ' | grep -vc ' - gpu:')
    targets=""
    if [[ $rc -eq 0 && "$name" == blas-unrecognised ]]; then
      # The speed the CPU can reach: bench kernels and bench layer, each ratio against the same
      # run's sgemm on the kernels ringside chose, every one at its target.
      bench="$LOGS/$name.bench.log"
      { env $environment "$BUILD/ringside" bench kernels && env $environment "$BUILD/ringside" bench layer; } > "$bench" 2>&1 || rc=1
      if grep -Eq 'BELOW TARGET|vs fallback' "$bench" || ! grep -q ' ok ' "$bench"; then rc=1; fi
      targets=$(grep -E '^  (forward|backward|gpt|llama)' "$bench" | awk '{for (i = 1; i <= NF; ++i) if ($i == ">=") { printf "%s%s", sep, $(i - 1); sep = " " }}')
      targets="; bench ratios $targets (log $bench)"
    fi
    if [[ $rc -eq 0 && -n "$summary" ]]; then
      printf 'PASS  %-16s %-52s %s tests, 0 failed, %s skipped (not counting gpu:), %d s%s\n' "$name" "$shown" "$total" "$skipped" "$seconds" "$targets"
    else
      failed=1
      names=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' | sed -E 's/^\s+[0-9]+ - //; s/ \([^()]*\)$//' | paste -sd ';' -)
      printf 'FAIL  %-16s %-52s %s of %s failed (%s), %d s; log %s%s\n' "$name" "$shown" "${nfailed:-?}" "${total:-?}" "$names" "$seconds" "$log" "$targets"
    fi
  done
  exit $failed
}
main "$@"
