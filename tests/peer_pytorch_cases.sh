#!/usr/bin/env bash
# Issue 58: `ringside bench layer --peer pytorch`, one case per call (tests/CMakeLists.txt):
#   peer_pytorch_cases.sh CASE RINGSIDE SOURCE_DIR WORK_DIR
# No case asserts a time: what the peer measures varies; that it ran, named, refused, is what is checked.
set -u
case_name=$1 r=$2 src=$3 work=$4
e="$src/tests/expect_error.sh"
fake="$src/tests/fake_peer_python.py"
layer=(--seq 256 --hidden 128 --heads 4 --kv-heads 2 --ffn 256 --repetitions 1)
# The GPT layer at that shape: h (H + 2 Hkv) d + H d h + h f + f h, norms 4 h, biases (H + 2 Hkv) d + f + 2 h.
gpt_params=115968
mkdir -p "$work"
fail() { echo "peer_pytorch_cases: $case_name: $*"; exit 1; }

# A fake peer that hangs wrote its pid: after ringside returned, that process must be gone.
gone() {
  local pid
  pid=$(cat "$work/fake.pid") || fail "the fake peer wrote no pid"
  kill -0 "$pid" 2>/dev/null && { kill -9 "$pid"; fail "the peer (pid $pid) outlived ringside"; }
  return 0
}

case $case_name in
  skipped)
    # torch hidden from the real python3 (tests/fixtures/no_torch): the embedded script says skip,
    # and the benchmark goes on, exit 0.
    out=$(PYTHONPATH="$src/tests/fixtures/no_torch" "$r" bench layer "${layer[@]}" --peer pytorch --python python3) || fail "exit $?"
    echo "$out"
    grep -Eq "^  peer pytorch: skipped \(.*cannot import torch: No module named 'torch' \(hidden by tests/fixtures/no_torch\); --python or RINGSIDE_PYTHON names a Python with torch\)$" <<<"$out" || fail "no skip line"
    grep -Eq "llama layer backward .* >= 0.70" <<<"$out" || fail "the benchmark did not go on"
    grep -q "pytorch eager" <<<"$out" && fail "rows of a skipped peer"
    # No python3 on PATH, and none named: skipped too, naming it.
    mkdir -p "$work/empty-path"
    out=$(PATH="$work/empty-path" "$r" bench layer "${layer[@]}" --peer pytorch) || fail "exit $?"
    grep -q "peer pytorch: skipped (cannot run python3: No such file or directory; --python or RINGSIDE_PYTHON" <<<"$out" || fail "$out"
    ;;
  script)
    # What the peer runs is src/cli/peer_pytorch.py to the byte, with its layer's config as JSON.
    # Each fake records its arguments; the first layer's (this one: RMSNorm, SwiGLU, biases) wrote
    # them before it said skip, the others may have been ended first.
    rm -rf "$work/argv" && mkdir -p "$work/argv"
    out=$(RINGSIDE_FAKE_PEER=script RINGSIDE_FAKE_PEER_OUT="$work/argv" "$r" bench layer "${layer[@]}" \
      --norm rmsnorm --mlp swiglu --peer pytorch --python "$fake") || fail "exit $?"
    grep -q "peer pytorch: skipped (the fake peer only records its script; --python or RINGSIDE_PYTHON names a Python with torch)" <<<"$out" || fail "$out"
    python3 - "$work/argv" "$src/src/cli/peer_pytorch.py" <<'EOF' || fail "the peer's arguments"
import glob, json, sys
script = open(sys.argv[2]).read()
layers = set()
for path in glob.glob(f"{sys.argv[1]}/*.json"):
    argv = json.load(open(path))["argv"]
    assert argv[0] == "-c" and argv[2] == "--config" and len(argv) == 4, argv[:1] + argv[2:]
    assert argv[1] == script, "the embedded script differs from src/cli/peer_pytorch.py"
    c = json.loads(argv[3])
    want = {"b": 1, "s": 256, "h": 128, "H": 4, "Hkv": 2, "f": 256, "causal": True, "rope": True, "dropout": 0.1}
    assert all(c[k] == v for k, v in want.items()), c
    layers.add((c["norm"], c["mlp"], c["bias"]))
assert ("rmsnorm", "swiglu", True) in layers, layers
print("the peers got the script and the layers", sorted(layers))
EOF
    ;;
  wrong-count)
    # A peer whose layer has one parameter more: the layers are not the same, an error naming both counts.
    RINGSIDE_FAKE_PEER=wrong-count bash "$e" --rc 1 \
      "^ringside: error: peer pytorch \(gpt layer\): the PyTorch peer built a different layer: $((gpt_params + 1)) parameters against ringside's $gpt_params$" \
      "$r" bench layer "${layer[@]}" --peer pytorch --python "$fake" || exit 1
    # The Llama layer first (asked for), its own count: RMSNorm (gamma), SwiGLU's [h, 2f] W1, no biases.
    RINGSIDE_FAKE_PEER=wrong-count bash "$e" --rc 1 \
      "peer pytorch \(llama layer\): the PyTorch peer built a different layer: 147713 parameters against ringside's 147712$" \
      "$r" bench layer "${layer[@]}" --norm rmsnorm --mlp swiglu --no-bias --peer pytorch --python "$fake" || exit 1
    ;;
  hang-or-die)
    # A peer that hangs (before ready, or in a round) is stopped after RINGSIDE_PEER_TIMEOUT and
    # named; one that dies is named with how it ended; none outlives ringside.
    for mode in hang-ready hang-round; do
      rm -f "$work/fake.pid"
      RINGSIDE_PEER_TIMEOUT=1 RINGSIDE_FAKE_PEER=$mode RINGSIDE_FAKE_PEER_OUT="$work/fake.pid" bash "$e" --rc 1 \
        "^ringside: error: peer pytorch \(gpt layer\): no answer in 1 s; stopped it \(RINGSIDE_PEER_TIMEOUT sets the wait\)$" \
        "$r" bench layer "${layer[@]}" --peer pytorch --python "$fake" || exit 1
      gone
    done
    RINGSIDE_FAKE_PEER=die-round bash "$e" --rc 1 \
      "^ringside: error: peer pytorch \(gpt layer\): it exited with status 3 before answering a round \(anything it wrote to stderr is above\)$" \
      "$r" bench layer "${layer[@]}" --peer pytorch --python "$fake" || exit 1
    RINGSIDE_FAKE_PEER=crash-round bash "$e" --rc 1 \
      "peer pytorch \(gpt layer\): it was killed by signal 11 \(Segmentation fault\) before answering a round" \
      "$r" bench layer "${layer[@]}" --peer pytorch --python "$fake" || exit 1
    RINGSIDE_FAKE_PEER=garbage-round bash "$e" --rc 1 \
      "peer pytorch \(gpt layer\): expected '<forward seconds> <backward seconds>' for a round, got 'fast and slow'" \
      "$r" bench layer "${layer[@]}" --peer pytorch --python "$fake" || exit 1
    ;;
  refused)
    # What the peer cannot run, or a wait that is no number of seconds: exit 2, before any work.
    bash "$e" --rc 2 "^ringside: --peer pytorch: the PyTorch peer runs one causal \(or full\) sequence: it builds no packed documents \(--docs\) or sliding window \(--window\)$" \
      "$r" bench layer "${layer[@]}" --docs 100,156 --peer pytorch --python "$fake" || exit 1
    bash "$e" --rc 2 "builds no packed documents" "$r" bench layer "${layer[@]}" --window 64 --peer pytorch || exit 1
    for t in 0 -1 soon 1e9 '' 0x10 ' 2' 1e1; do
      RINGSIDE_PEER_TIMEOUT=$t bash "$e" --rc 2 \
        "^ringside: RINGSIDE_PEER_TIMEOUT='$t' must be the seconds to wait for the PyTorch peer's answer, above 0 and up to 86400$" \
        "$r" bench layer "${layer[@]}" --peer pytorch --python "$fake" || exit 1
    done
    bash "$e" --rc 2 "--peer: torch not in \{pytorch\}" "$r" bench layer "${layer[@]}" --peer torch || exit 1
    # A Python the user named, by --python or $RINGSIDE_PYTHON, that cannot run; --python alone.
    bash "$e" --rc 2 "^ringside: --peer pytorch: cannot run $work/no-such-python: No such file or directory$" \
      "$r" bench layer "${layer[@]}" --peer pytorch --python "$work/no-such-python" || exit 1
    RINGSIDE_PYTHON="$work" bash "$e" --rc 2 "^ringside: --peer pytorch: cannot run $work: " \
      "$r" bench layer "${layer[@]}" --peer pytorch || exit 1
    bash "$e" --rc 2 "--python requires --peer" "$r" bench layer "${layer[@]}" --python python3 || exit 1
    ;;
  torch)
    # Where a Python with torch is found ($RINGSIDE_PYTHON, else python3): the module computes
    # ringside's layer (out, dx, every weight's gradient within fp32 rounding of a reference dump,
    # dropout by ringside's masks), GPT's, Llama's with GQA and a full (non-causal) one without
    # RoPE at batch 2; and bench layer prints its rows. Elsewhere: skipped (77).
    py=${RINGSIDE_PYTHON:-python3}
    "$py" -c "import torch, numpy" 2>/dev/null || { echo "SKIP: $py has no torch (and numpy)"; exit 77; }
    small=(--seq 256 --hidden 128 --ffn 256)
    i=0
    for extra in "--heads 4 --kv-heads 2" "--norm rmsnorm --mlp swiglu --no-bias --heads 8 --kv-heads 2" "--no-causal --no-rope --batch 2 --dropout 0.3 --heads 4 --kv-heads 4"; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      "$r" reference "${small[@]}" $extra --dump "$work/dump$i" > /dev/null || fail "reference --dump $extra"
      "$py" "$src/src/cli/peer_pytorch.py" --check "$work/dump$i" || fail "the module differs from ringside's layer ($extra)"
    done
    out=$("$r" bench layer "${layer[@]}" --peer pytorch --python "$py") || fail "exit $?"
    echo "$out"
    grep -Eq "PyTorch eager [0-9]+\.[0-9]+\S* \(CPU capability \S+, 1 thread\)" <<<"$out" || fail "no header"
    for row in "gpt layer forward" "gpt layer backward" "llama layer forward" "llama layer backward"; do
      grep -Eq "^  pytorch eager $row +[0-9.]+ [mu]?s +[0-9.]+ GFLOP/s +ringside [0-9]+\.[0-9][0-9]x (faster|\(behind\))$" <<<"$out" ||
        fail "no row '$row'"
    done
    ;;
  *) fail "unknown case" ;;
esac
echo "peer_pytorch_cases: $case_name: passed"
