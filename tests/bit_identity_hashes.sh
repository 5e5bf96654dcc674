#!/usr/bin/env bash
# Takes the bit-identity hashes (tests/test_bit_identity.cpp's [.bits] test) anew, once per
# OpenBLAS kernel set of Debian 12's OpenBLAS (forced with OPENBLAS_CORETYPE) and per variant of
# glibc's libm (the FMA one, and the SSE2 one that CPUs without FMA and AVX2 load, chosen here by
# masking those features with GLIBC_TUNABLES), and writes tests/bit_identity_hashes.inc: one
# entry per distinct list, naming every kernel set that computes it. Take them on a machine with
# AVX-512, which runs every kernel set but those needing what Intel CPUs lack (said, skipped).
# Run it only when a change is meant to change the bits, and say why in the commit:
#   tests/bit_identity_hashes.sh build/tests/ringside_tests
set -euo pipefail
tests=${1:?usage: bit_identity_hashes.sh path/to/ringside_tests}
out="$(dirname "$0")/bit_identity_hashes.inc"
sets=(Haswell Zen SkylakeX Cooperlake Sandybridge Nehalem Core2 Penryn Dunnington Atom Prescott
      Opteron Barcelona Bobcat Bulldozer Piledriver Steamroller Excavator Nano)
libms=("fma|" "sse2|glibc.cpu.hwcaps=-AVX2,-FMA")
declare -A names=() libm_of=()
order=()
for libm in "${libms[@]}"; do
  IFS='|' read -r libm_name tunables <<<"$libm"
  for s in "${sets[@]}"; do
    # A set may need instructions this CPU lacks (Opteron's 3DNow!, Bulldozer's FMA4).
    if ! line=$(GLIBC_TUNABLES=$tunables OPENBLAS_CORETYPE=$s RINGSIDE_PRINT_HASHES=1 "$tests" "[bits]" 2>/dev/null |
                grep '^  {{"' | grep '}},$'); then
      echo "the $s kernels do not run on this CPU: skipped" >&2
      continue
    fi
    got=$(sed 's/^  {{"\([^"]*\)"}.*/\1/' <<<"$line")
    [[ "$got" == "$s" ]] || { echo "OPENBLAS_CORETYPE=$s ran the $got kernels: skipped" >&2; continue; }
    key="${line#*\}, }"  # the libm's fingerprint and the hashes
    if [[ -z "${names[$key]:-}" ]]; then
      names[$key]="\"$s\""
      libm_of[$key]=$libm_name
      order+=("$key")
      echo "$s, libm $libm_name: a list of its own" >&2
    else
      names[$key]+=", \"$s\""
    fi
  done
done
{
  echo "// Written by tests/bit_identity_hashes.sh: per OpenBLAS kernel set and libm (its fingerprint),"
  echo "// the hashes of kCases in order, on the generic path of every float kernel. Kernel sets that"
  echo "// compute the same bits share an entry."
  for key in "${order[@]}"; do
    echo "  // glibc's ${libm_of[$key]} libm"
    echo "  {{${names[$key]}}, $key"
  done
} > "$out"
echo "wrote $out: ${#order[@]} distinct lists"
