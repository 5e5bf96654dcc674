#!/usr/bin/env bash
# Issue 58: which OpenBLAS kernels ringside runs, one case a test.
#   blas_kernels_cases.sh CASE RINGSIDE MPIRUN
# The expected kernel set is read from /proc/cpuinfo, independently of ringside's own detection:
# SkylakeX with AVX-512 F, BW, DQ and VL; Haswell with AVX2 and FMA; none better otherwise.
set -u
case_name=$1 ringside=$2 mpirun=${3:-}
tiny=(--seq 32 --hidden 64 --heads 8 --kv-heads 4 --ffn 128)
flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
best=""
if has avx512f avx512bw avx512dq avx512vl; then best=SkylakeX; width=AVX-512
elif has avx2 fma; then best=Haswell; width=AVX2; fi
fail() { echo "FAIL: $*"; exit 1; }
# The backend line of `ringside reference` under the given environment.
backend() { env "$@" "$ringside" reference "${tiny[@]}" | grep -m1 '^  backend' || fail "no backend line under $*"; }
unset OPENBLAS_CORETYPE RINGSIDE_OPENBLAS_CHOSE RINGSIDE_OPENBLAS_FALLBACK

case $case_name in
  fallback)
    # As on a CPU OpenBLAS does not recognise: it loads Prescott, ringside restarts on the best.
    line=$(backend RINGSIDE_OPENBLAS_FALLBACK=1)
    echo "$line"
    if [[ -z "$best" ]]; then
      [[ "$line" == *", kernel set Prescott (SSE2), OpenBLAS's choice; "* ]] || fail "no wider kernels on this CPU: Prescott expected, unchanged"
    else
      want="kernel set $best ($width), ringside's choice for this CPU (OpenBLAS's own: Prescott, SSE2); "
      [[ "$line" == *"$want"* ]] || fail "expected: $want"
    fi
    # The benchmark's reference sgemm on the best kernels, and a verdict judged against it.
    out=$(RINGSIDE_OPENBLAS_FALLBACK=1 "$ringside" bench kernels --seq 64 --heads 1 --min-time 0.001 --repetitions 1 --single-shape) || fail "bench kernels failed"
    echo "$out"
    if [[ -n "$best" ]]; then
      grep -q "sgemm 2048^3, $best (best)" <<<"$out" || fail "sgemm not labelled $best (best)"
      ! grep -q "vs fallback" <<<"$out" || fail "a verdict against a fallback after ringside chose the best"
    fi
    # Under mpirun: every rank restarts before MPI_Init and the job runs.
    if [[ -n "$mpirun" ]]; then
      out=$(RINGSIDE_OPENBLAS_FALLBACK=1 $mpirun -np 2 "$ringside" run --strategy ring "${tiny[@]}" 2>&1) || { echo "$out"; fail "mpirun -np 2 after the restart"; }
      grep -q "mpi backend" <<<"$out" || { echo "$out"; fail "not on the mpi backend"; }
    fi
    ;;
  forced)
    # A set the user forces is kept, and a ratio against a narrower one is a ratio against a fallback.
    [[ -n "$best" ]] || { echo "SKIPPED: this CPU has no kernels wider than Prescott's"; exit 77; }
    line=$(backend OPENBLAS_CORETYPE=Prescott)
    echo "$line"
    want="kernel set Prescott (SSE2), as OPENBLAS_CORETYPE asks, below this CPU's best, $best ($width): unset OPENBLAS_CORETYPE for it; "
    [[ "$line" == *"$want"* ]] || fail "expected: $want"
    out=$(OPENBLAS_CORETYPE=Prescott "$ringside" bench kernels --seq 64 --heads 1 --min-time 0.001 --repetitions 1 --single-shape) || fail "bench kernels failed"
    echo "$out"
    grep -q "sgemm 2048^3, Prescott (fallback)" <<<"$out" || fail "sgemm not labelled a fallback"
    [[ $(grep -c "vs fallback" <<<"$out") == 2 ]] || fail "forward and backward not both 'vs fallback'"
    ! grep -Eq " ok | BELOW TARGET" <<<"$out" || fail "a target judged against a fallback"
    grep -q "each ratio is against a fallback and no target is judged; unset OPENBLAS_CORETYPE to measure against the best" <<<"$out" || fail "no note"
    # The user's choice is kept under the simulation too: the CPU's own best, and Prescott itself.
    line=$(backend OPENBLAS_CORETYPE=$best RINGSIDE_OPENBLAS_FALLBACK=1)
    [[ "$line" == *", kernel set $best ($width), as OPENBLAS_CORETYPE asks; "* ]] || fail "forced $best: $line"
    line=$(backend OPENBLAS_CORETYPE=Prescott RINGSIDE_OPENBLAS_FALLBACK=1)
    [[ "$line" == *", kernel set Prescott (SSE2), as OPENBLAS_CORETYPE asks, below"* ]] || fail "forced Prescott under the simulation: $line"
    # What ringside chose once is not chosen again: the restarted process says so and stays.
    line=$(backend OPENBLAS_CORETYPE=$best "RINGSIDE_OPENBLAS_CHOSE=$best over Prescott")
    [[ "$line" == *", kernel set $best ($width), ringside's choice for this CPU (OpenBLAS's own: Prescott, SSE2); "* ]] || fail "chose: $line"
    # A leftover RINGSIDE_OPENBLAS_CHOSE that ringside would not have written is not believed.
    line=$(backend OPENBLAS_CORETYPE=Prescott "RINGSIDE_OPENBLAS_CHOSE=Prescott over $best")
    [[ "$line" == *", kernel set Prescott (SSE2), as OPENBLAS_CORETYPE asks, below"* ]] || fail "leftover: $line"
    ;;
  refused)
    for value in yes 2 " 1" on; do
      out=$(RINGSIDE_OPENBLAS_FALLBACK="$value" "$ringside" reference "${tiny[@]}" 2>&1)
      rc=$?
      [[ $rc == 2 ]] || fail "RINGSIDE_OPENBLAS_FALLBACK='$value': exit $rc, expected 2"
      grep -q "RINGSIDE_OPENBLAS_FALLBACK: expected 1 (act as on a CPU OpenBLAS does not recognise) or 0, not '$value'" <<<"$out" || fail "message for '$value': $out"
    done
    RINGSIDE_OPENBLAS_FALLBACK=0 "$ringside" reference "${tiny[@]}" > /dev/null || fail "RINGSIDE_OPENBLAS_FALLBACK=0 refused"
    ;;
  *) echo "blas_kernels_cases.sh: no case '$case_name'" >&2; exit 2 ;;
esac
echo "PASS: $case_name"
