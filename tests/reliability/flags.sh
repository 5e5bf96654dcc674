#!/usr/bin/env bash
# Flags mean what they say, and messages point the right way (issue 15): flags.sh RINGSIDE.
#   - a flag and its opposite together, an empty value, a seed past 2^64 - 1 or with a space:
#     errors, never a silent value; every configuration error exits 2;
#   - a dropout too near 1 for the mask is refused; one that drops everything is not "OK";
#   - a timeout that a slowed link causes names the link; a malformed failure-injection spec
#     is the command's error, not a rank's failure; absurd benchmark sizes name the memory.
source "$(dirname "$0")/lib.sh"

# --- contradictions and empty or out-of-range values: exit 2, before any work.
for sub in "reference" "compare" "run --strategy ring" "model --strategy ring"; do
  read -ra cmd <<<"$sub"
  expect 2 "--causal excludes --no-causal" "$RS" "${cmd[@]}" "${SMALL[@]}" --causal --no-causal
  expect 2 "--rope excludes --no-rope" "$RS" "${cmd[@]}" "${SMALL[@]}" --no-rope --rope
  expect 2 "--dropout: needs a value, got an empty one" "$RS" "${cmd[@]}" "${SMALL[@]}" --dropout ''
  expect 2 "--dropout: must be a finite decimal number, got ' 0.1'" "$RS" "${cmd[@]}" "${SMALL[@]}" --dropout ' 0.1'
done
expect 2 "--causal excludes --no-causal" "$RS" bench kernels --seq 64 --causal --no-causal
for flag in --seq --batch --hidden --heads --kv-heads --ffn --seed --layout; do
  expect 2 "$flag: needs a value, got an empty one" "$RS" reference "${SMALL[@]}" "$flag" ''
  expect 2 "$flag: (must be an integer.*, got '4 '|.*not in)" "$RS" reference "${SMALL[@]}" "$flag" '4 '
done
for value in 18446744073709551616 99999999999999999999 ' -1' -1 1e3 ' 7'; do
  expect 2 "--seed: must be an integer (>= 0|in \[0, 2\^64 - 1\]), got '$value'" "$RS" reference "${SMALL[@]}" --seed "$value"
done
expect 0 "seed=18446744073709551615" "$RS" reference "${SMALL[@]}" --seed 18446744073709551615
# A leading zero is decimal, as written (CLI11 alone reads 064 as octal 52, 010 as 8).
expect 0 "s=64 .* seed=10$" "$RS" reference --seq 064 --hidden 32 --heads 4 --kv-heads 2 --ffn 64 --seed 010
expect 0 "s=64 " "$RS" reference --seq "$(printf '0%.0s' {1..40000})64" --hidden 32 --heads 4 --kv-heads 2 --ffn 64
expect 0 "seed=0$" "$RS" reference "${SMALL[@]}" --seed 000
# Long values are one clear error, never a crash (std::regex recursed once per character).
expect 2 "--dropout: must be a finite decimal number, got '0\\.0+\\.\\.\\. \\(40004 characters\\)'" "$RS" reference "${SMALL[@]}" --dropout "0.$(printf '0%.0s' {1..40000})1x"
expect 2 "a name of 30004 characters is not a configuration" "$RS" run "${SMALL[@]}" --strategy "ring$(printf '1%.0s' {1..30000})"
expect 2 "--ranks: must be an integer of 64 bits at most, got '9+\\.\\.\\. \\(40000 characters\\)'" "$RS" compare "${SMALL[@]}" --ranks "$(printf '9%.0s' {1..40000})"
expect 2 "cannot write /proc/1111" "$RS" run "${SMALL[@]}" --strategy ring --trace "/proc/$(printf '1%.0s' {1..40000})/fd/1"
# A flag takes no value, whatever the value: --causal=false would run causal, and (issue 41)
# one rule for all, with the viewer's: --causal=true is refused too.
for flag in --causal=false --causal=0 --rope=false --no-causal=1 --causal=true --no-rope=true; do
  expect 2 "${flag%%=*} is a flag and takes no value: give ${flag%%=*} alone" "$RS" compare "${SMALL[@]}" "$flag"
done
expect 0 "causal no-rope" "$RS" reference "${SMALL[@]}" --no-rope
# One rule for numbers, strategy degrees included (issue 41): a leading zero is decimal.
expect 0 "ringside run tp2xring2: " "$RS" run "${SMALL[@]}" --ranks 4 --strategy tp02xring002
expect 2 "strategy 'ring0': 'ring0': a degree is at least 1" "$RS" run "${SMALL[@]}" --strategy ring0
# Numbers as decimals: no hex, no infinity, nothing that underflows to 0.
for value in 0x1p-2 inf 1e-400 .; do
  expect 2 "--dropout: must be a finite decimal number, got '$value'" "$RS" reference "${SMALL[@]}" --dropout "$value"
done
expect 2 "--min-time: must be a finite (decimal )?number, got 'nan'" "$RS" bench kernels --seq 64 --min-time nan
# Every number of every subcommand as one decimal number: no hex, sign or space.
for option in "compare --ranks 0x2" "compare --ranks +2" "compare --ranks ' 2'" "compare --timeout 0x10" \
    "compare --link-bandwidth 1e-400" "run --strategy ring --link-latency 0x0" "bench kernels --head-dim 0x10" \
    "bench comm --min-bytes 0x400" "bench trace --repetitions 0x1" "model --strategy ring --ranks 0x4" "lesson 0x2"; do
  eval "expect 2 'must be an integer|must be a finite' \"\$RS\" $option"
done
expect 2 "--strategies: empty name in 'ring,'" "$RS" compare "${SMALL[@]}" --strategies ring,
for option in --timeout --ranks --link-bandwidth --trace --json --strategies; do
  expect 2 "$option: needs a value, got an empty one" "$RS" compare "${SMALL[@]}" "$option" ''
done
expect 2 "--hw: needs a value, got an empty one" "$RS" model --strategy ring --hw ''
expect 2 "--ranks: Value 0 not in range" "$RS" compare "${SMALL[@]}" --ranks 0

# --- dropout near 1.
expect 2 "dropout p = 0.99999997 is too near 1 for the mask's 24-bit resolution" "$RS" compare "${SMALL[@]}" --dropout 0.99999997
expect 2 "dropout p must be in \[0, 1\), got 1$" "$RS" reference "${SMALL[@]}" --dropout 1
# Allowed, but on 48 tokens it drops everything: nothing is compared, so nothing is OK.
expect 1 "FAIL: nothing to compare: grad.ln1.gamma and 11 more tensors are all zero in the fp64 reference" \
  "$RS" compare "${SMALL[@]}" --dropout 0.999996
expect 1 "verdict +FAIL: .*nothing to compare" "$RS" reference "${SMALL[@]}" --dropout 0.999996 --check

# --- configuration errors are exit 2 everywhere, bench model included.
expect 2 "sequence length s must be >= 1, got 0" "$RS" bench model --seq 0
expect 2 "dropout p must be in \[0, 1\), got 2" "$RS" bench model --dropout 2
expect 2 "no strategy can split this layer 3 ways.*padded from s = 2147483647" "$RS" bench model --ranks 3 --seq 2147483647
expect 2 "not a profile" "$RS" bench model --hw tpu-v9
expect 2 "--min-bytes must not exceed --max-bytes" "$RS" bench comm --min-bytes 4096 --max-bytes 1024

# --- configurations (issue 16): the flags and names mean one configuration, printed by its
# canonical name; a contradiction is refused before any rank starts.
expect 0 "ringside run tp2xulysses2: " "$RS" run --ranks 4 "${SMALL[@]}" --tp 2 --cp-comm a2a
expect 0 "ringside run ring: " "$RS" run --ranks 4 "${SMALL[@]}" --strategy ring4
expect 0 "ringside run ring: " "$RS" run --ranks 4 "${SMALL[@]}" --cp 4
expect 0 "ringside run tp2xall-gather2: " "$RS" run --ranks 4 "${SMALL[@]}" --tp 2 --cp-comm all-gather
expect 0 "ringside run tp: " "$RS" run --ranks 2 "${SMALL[@]}" --strategy tp    # plain TP, no longer tp-sp
expect 0 "ringside run tp-sp: " "$RS" run --ranks 2 "${SMALL[@]}" --strategy tp2  # a TP degree keeps SP
expect 0 "ringside run tp2xring2: " "$RS" run --ranks 4 "${SMALL[@]}" --tp 2   # C takes the rest: the ring
expect 0 "groups     TP \\{0 1\\} \\{2 3\\}; ring \\{0 2\\} \\{1 3\\} \\(world ranks\\)" "$RS" run --ranks 4 "${SMALL[@]}" --tp 2
expect 0 "ringside run tp2xulysses2: " "$RS" run --ranks 4 "${SMALL[@]}" --tp 2 --cp 2 --cp-comm a2a+p2p --cp-a2a 2
expect 0 "ringside run ring: " "$RS" run --ranks 4 "${SMALL[@]}" --strategy ulysses1xring4
expect 2 "--tp 3 does not divide P = 4" "$RS" run --ranks 4 "${SMALL[@]}" --tp 3
expect 2 "T x C must equal P, but T 2 x C 1 = 2 and P = 4" "$RS" run --ranks 4 "${SMALL[@]}" --tp 2 --cp 1
expect 2 "--cp-a2a 3 must divide --cp 4" "$RS" run --ranks 4 "${SMALL[@]}" --cp 4 --cp-comm a2a+p2p --cp-a2a 3
expect 2 "--cp-a2a 2 is the all-to-all degree of --cp-comm a2a\\+p2p, but --cp-comm is not given" "$RS" run --ranks 4 "${SMALL[@]}" --cp 4 --cp-a2a 2
expect 2 "--cp-comm a2a\\+p2p needs --cp-a2a U" "$RS" run --ranks 4 "${SMALL[@]}" --cp 4 --cp-comm a2a+p2p
expect 2 "degree 99999999999999999999 is above 1048576 ranks" "$RS" run --ranks 4 "${SMALL[@]}" --strategy tp2xring99999999999999999999
expect 2 "a name cannot end with 'x'" "$RS" run --ranks 4 "${SMALL[@]}" --strategy ring4x
expect 2 "--cp-a2a and --order need the degrees" "$RS" run --ranks 4 "${SMALL[@]}" --order cp-tp
expect 2 "the cp-tp order .* needs both degrees above 1" "$RS" run --ranks 4 "${SMALL[@]}" --tp 4 --order cp-tp
expect 2 "give --strategy NAME or the degrees .* not both" "$RS" run --ranks 4 "${SMALL[@]}" --strategy ring --cp 4
expect 2 "degree 9999999 is above 1048576 ranks" "$RS" run --ranks 4 "${SMALL[@]}" --strategy ulysses2xring9999999
expect 2 "U x R = 1048578 is above 1048576 ranks" "$RS" model --ranks 4 --strategy ulysses2xring524289
expect 2 "strategy 'ring\\?': 'ring\\?' is not a group" "$RS" compare "${SMALL[@]}" --strategies "$(printf 'ring\x01')"
expect 0 "tp2xring2 +4 .* OK" "$RS" compare --ranks 4 "${SMALL[@]}" --tp 2 --cp 2
expect 2 "give --strategies NAMES or the degrees .* not both" "$RS" compare --ranks 4 "${SMALL[@]}" --tp 2 --strategies ring
expect 2 "--strategy and the degrees .* --from reads a trace" "$RS" model --cp 4 --from /dev/null

# --- messages that point the right way.
expect 0 "the lesson, 1 to 11 \\(none: list them\\)" "$RS" lesson --help
expect 2 "^ringside: RINGSIDE_INJECT_FAILURE='7:forward' must be RANK:forward or RANK:backward with 0 <= RANK < 2$" \
  env RINGSIDE_INJECT_FAILURE=7:forward "$RS" run --strategy ring "${SMALL[@]}" --ranks 2
for spec in soon ' 0:forward' '0:forward ' '1:Forward' '-1:forward'; do
  expect 2 "RINGSIDE_INJECT_FAILURE='$spec' must be" env RINGSIDE_INJECT_FAILURE="$spec" "$RS" compare "${SMALL[@]}" --ranks 2
done
expect 2 "--link-latency 1e\+08 us is at least --timeout 60 s: every transfer would time out" \
  "$RS" run --strategy ring "${SMALL[@]}" --ranks 2 --link-latency 1e8
# A link slow enough to outlast the timeout: 2 MiB K/V blocks at 1 MB/s, against 1 s.
expect 1 "did not complete within 1 s \(the slowed link \(latency 0 us, bandwidth 0.001 GB/s\) may be too slow for it: raise --timeout\)" \
  "$RS" run --strategy ring --seq 4096 --ranks 2 --link-bandwidth 0.001 --timeout 1
expect 2 "bench kernels at this size needs about .* of memory and this (machine has|cgroup allows)" \
  "$RS" bench kernels --seq 1048576 --heads 256 --head-dim 1024
finish
