#!/usr/bin/env python3
"""`ringside calibrate` as a user runs it, on the fixtures of tests/fixtures/calibrate/.

  calibrate_checks.py RINGSIDE FIXTURES OUTDIR known      the generated runs at known rates: every
      rate the truth profile moves is fitted and within 2% of it, every other value the base's
  calibrate_checks.py RINGSIDE FIXTURES OUTDIR loop       model --hw <calibrated> --compare <run>:
      each phase's measured / modeled within 10% (and the uncalibrated base further off)
  calibrate_checks.py RINGSIDE FIXTURES OUTDIR public     the HolisticTraceAnalysis traces: a profile
      written, each fitted parameter with its samples, the kept ones said
"""
import json
import os
import re
import subprocess
import sys

RINGSIDE, FIXTURES, OUT, WHAT = sys.argv[1:5]
os.makedirs(OUT, exist_ok=True)
KNOWN = [os.path.join(FIXTURES, "known"), os.path.join(FIXTURES, "known-4k")]
# The configuration the known runs are of (tests/fixtures/calibrate/README.md).
CONFIG = ["--preset", "llama3-8b", "--seq", "16384", "--tp", "2", "--cp", "2", "--ranks", "4", "--layout", "zigzag",
          "--dropout", "0", "--attention-kernel", "fa3"]
failures = []


def run(*args):
    p = subprocess.run([RINGSIDE, *args], capture_output=True, text=True)
    print("$ ringside " + " ".join(args) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        sys.exit(f"ringside {' '.join(args)} exited {p.returncode}")
    return p.stdout


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def calibrated(out, *runs, base="h100-nvlink"):
    run("calibrate", *runs, "--out", out, "--base", base)
    with open(out) as f:
        return json.load(f)


def truth_values():
    """The truth profile's moved values, by calibrate's parameter names."""
    with open(os.path.join(FIXTURES, "truth.json")) as f:
        t = json.load(f)
    e = t["efficiency"]
    want = {"efficiency.gemm.bf16": e["gemm"]["bf16"], "efficiency.gemm.k_half": e["gemm"]["k_half"],
            "efficiency.memory.fraction": e["memory"]["fraction"], "efficiency.memory.launch_us": e["memory"]["launch_us"]}
    for family, curves in e["attention"].items():
        for curve, v in curves.items():
            if isinstance(v, dict) and "tflops" in v:
                want[f"efficiency.attention.{family}.{curve}.tflops"] = v["tflops"]
    for i, tier in enumerate(t["tiers"]):
        want[f"tiers[{i}] ({tier['name']}).latency_us"] = tier["latency_us"]
        want[f"tiers[{i}] ({tier['name']}).efficiency"] = tier["efficiency"]
    return want


def known():
    profile = calibrated(os.path.join(OUT, "known.json"), *KNOWN)
    params = {p["name"]: p for p in profile["calibration"]["parameters"]}
    for name, want in truth_values().items():
        p = params.get(name)
        check(p is not None and p["fitted"], f"{name} fitted (the truth moves it to {want})")
        if p and p["fitted"]:
            check(abs(p["value"] / want - 1) <= 0.02, f"{name} = {p['value']:.6g}, within 2% of the truth's {want} "
                  f"({p['samples']} samples)")
    for name, p in params.items():
        if not p["fitted"]:
            check(p["value"] == p["base"] and p.get("kept_because"), f"{name} kept at the base's {p['base']}: {p.get('kept_because')}")
    check(profile["source"].startswith("calibrated from "), "the profile names its source: " + profile["source"][:80])
    check(profile["calibration"]["gpus_per_node"] == 2, "2 GPUs a node, from the files' host names")


def phases(text):
    """measured/modeled of each (phase, figure) row of model --compare's table."""
    ratios, phase = {}, None
    for line in text.splitlines():
        m = re.match(r"^  (\S.{0,17}?)?\s{2,}(time|compute|comm|window)\s+.*\s(\S+)$", line)
        if not m:
            continue
        if m.group(1) and m.group(1).strip():
            phase = m.group(1).strip()
        if m.group(3) != "-":
            ratios[(phase, m.group(2))] = float(m.group(3))
    return ratios


def loop():
    out = os.path.join(OUT, "loop.json")
    calibrated(out, *KNOWN)
    mine = phases(run("model", *CONFIG, "--hw", out, "--compare", KNOWN[0]))
    base = phases(run("model", *CONFIG, "--hw", "h100-nvlink", "--compare", KNOWN[0]))
    check(("forward", "time") in mine and ("backward", "time") in mine, "the compare has forward and backward rows")
    for (phase, figure), r in sorted(mine.items()):
        check(0.9 <= r <= 1.1, f"calibrated: {phase} {figure}: measured / modeled {r} within 10%")
    worst = max(abs(r - 1) for r in base.values())
    check(worst > 0.05, f"uncalibrated (h100-nvlink): the worst phase is {worst:.1%} off, the calibration matters")


def public():
    hta = os.path.join(FIXTURES, "hta")
    for name in sorted(os.listdir(hta)):
        folder = os.path.join(hta, name)
        if not os.path.isdir(folder):
            continue
        out = os.path.join(OUT, f"hta-{name}.json")
        text = run("calibrate", folder, "--out", out, "--base", "a100-nvlink")
        with open(out) as f:
            profile = json.load(f)
        params = profile["calibration"]["parameters"]
        fitted = [p for p in params if p["fitted"]]
        check(len(fitted) >= 1, f"{name}: {len(fitted)} parameters fitted: " + ", ".join(f"{p['name']} {p['value']:.4g} ({p['samples']} samples)" for p in fitted))
        check(all(p["samples"] > 0 for p in fitted), f"{name}: every fitted parameter has its samples")
        check(all(p["value"] <= 1 for p in fitted if p["name"].endswith(("fraction", "efficiency", "bf16", "fp32", "fp8"))),
              f"{name}: no fitted efficiency above 1")
        check("kept from a100-nvlink" in text, f"{name}: the kept parameters are said")
        run("model", "--hw", out, "--strategy", "tp-sp", "--ranks", "2", "--seq", "4096")


{"known": known, "loop": loop, "public": public}[WHAT]()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
