#!/usr/bin/env python3
"""Issue 57: `ringside reference --recompute MODE` saves each mode's formula, as `run` does.

Usage: recompute_cli.py RINGSIDE WORKDIR

For the issue's layer (--seq 512 --hidden 128 --heads 4 --kv-heads 4 --ffn 512, where reference
--recompute full saved none's 4.02 MiB) and Llama's layer (RMSNorm, SwiGLU, no biases), for
none, selective and full: the reference's saved bytes (its "saved" line, exact) equal the
formula computed here, the formula it prints beside them, and what a one-rank run of the same
flags measures (compare --json, per_rank peak_saved_bytes, and its reference row's).
"""
import json
import os
import re
import subprocess
import sys

LAYERS = {
    "issue 57's": ["--seq", "512", "--hidden", "128", "--heads", "4", "--kv-heads", "4", "--ffn", "512"],
    "Llama's": ["--seq", "256", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "96", "--norm", "rmsnorm",
                "--mlp", "swiglu", "--no-bias"],
}


def value(args, flag, default):
    return int(args[args.index(flag) + 1]) if flag in args else default


def formula_bytes(args, mode):
    """fp32 bytes saved for the backward, N (6h + 2 Hkv d + F + f + 2z + H) and its modes."""
    s, h, H, Hkv, f = (value(args, k, d) for k, d in
                       (("--seq", 4096), ("--hidden", 512), ("--heads", 8), ("--kv-heads", 4), ("--ffn", 2048)))
    N, d = s, h // H
    swiglu, rms = "swiglu" in args, "rmsnorm" in args
    F, z = (2 * f if swiglu else f), (1 if rms else 2)
    per_token = {"none": 6 * h + 2 * Hkv * d + F + f + 2 * z + H, "selective": 4 * h + 2 * Hkv * d + F + H, "full": h}[mode]
    return 4 * N * per_token


def main(ringside, work):
    os.makedirs(work, exist_ok=True)
    failures = []
    for name, layer in LAYERS.items():
        for mode in ("none", "selective", "full"):
            what = f"{name} layer, --recompute {mode}"
            out = subprocess.run([ringside, "reference", "--recompute", mode] + layer, capture_output=True, text=True,
                                 check=True).stdout
            m = re.search(r"saved +peak saved activations .* \((\d+) bytes\); formula (\S.*) (\d[\d.]* \S+): (\w+)", out)
            if not m:
                failures.append(f"{what}: no saved line in\n{out}")
                continue
            saved, verdict = int(m.group(1)), m.group(4)
            expect = formula_bytes(layer, mode)
            j = os.path.join(work, f"compare-{len(failures)}-{mode}-{name[:5]}.json")
            subprocess.run([ringside, "compare", "--ranks", "1", "--strategies", "ring", "--recompute", mode, "--json", j] + layer,
                           capture_output=True, check=True)
            c = json.load(open(j))
            run_saved = c["strategies"][0]["per_rank"][0]["peak_saved_bytes"]
            ref_saved = c["reference_fp32"]["peak_saved_bytes"]
            print(f"{what}: reference saves {saved} bytes ({m.group(2)}, {verdict}); formula {expect}; "
                  f"a one-rank run {run_saved}; compare's reference {ref_saved}")
            if not (saved == expect == run_saved == ref_saved and verdict == "equal"):
                failures.append(f"{what}: reference {saved}, formula {expect}, run {run_saved}, compare's reference {ref_saved}, "
                                f"the reference's own verdict {verdict!r}")
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
