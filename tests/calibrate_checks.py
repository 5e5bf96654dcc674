#!/usr/bin/env python3
"""`ringside calibrate` as a user runs it, on the fixtures of tests/fixtures/calibrate/.

  calibrate_checks.py RINGSIDE FIXTURES OUTDIR known      the generated runs at known rates: every
      rate the truth profile moves is fitted and within 2% of it, every other value the base's
  calibrate_checks.py RINGSIDE FIXTURES OUTDIR loop       model --hw <calibrated> --compare <run>:
      each phase's measured / modeled within 10% (and the uncalibrated base further off)
  calibrate_checks.py RINGSIDE FIXTURES OUTDIR public     the HolisticTraceAnalysis traces: a profile
      written, each fitted parameter with its samples, the kept ones said
  calibrate_checks.py RINGSIDE FIXTURES OUTDIR bad        bad runs and options: one error naming the
      file (and event), exit 2 or 1, no profile written; a run without shapes reported, not fitted to
"""
import gzip
import json
import os
import re
import subprocess
import sys

RINGSIDE, FIXTURES, OUT, WHAT = sys.argv[1:5]
os.makedirs(OUT, exist_ok=True)
KNOWN = [os.path.join(FIXTURES, name) for name in ("known", "known-4k", "known-cp4")]
# The configurations the known runs are of (tests/fixtures/calibrate/README.md).
COMMON = ["--preset", "llama3-8b", "--ranks", "4", "--layout", "zigzag", "--dropout", "0", "--attention-kernel", "fa3"]
CONFIGS = {"known": COMMON + ["--seq", "16384", "--tp", "2", "--cp", "2"],
           "known-4k": COMMON + ["--seq", "4096", "--tp", "2", "--cp", "2"],
           "known-cp4": COMMON + ["--seq", "16384", "--tp", "1", "--cp", "4"]}
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
                if not curve.endswith("_causal"):  # the masked curves' keys a query sees span too little here
                    want[f"efficiency.attention.{family}.{curve}.k_half"] = v["k_half"]
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
    for folder in KNOWN:
        name = os.path.basename(folder)
        mine = phases(run("model", *CONFIGS[name], "--hw", out, "--compare", folder))
        base = phases(run("model", *CONFIGS[name], "--hw", "h100-nvlink", "--compare", folder))
        check(("forward", "time") in mine and ("backward", "time") in mine, f"{name}: the compare has forward and backward rows")
        for (phase, figure), r in sorted(mine.items()):
            check(0.9 <= r <= 1.1, f"{name}, calibrated: {phase} {figure}: measured / modeled {r} within 10%")
        worst = max(abs(r - 1) for r in base.values())
        check(worst > 0.05, f"{name}, uncalibrated (h100-nvlink): the worst phase is {worst:.1%} off, the calibration matters")


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


def expect_error(rc, pattern, *args):
    p = subprocess.run([RINGSIDE, *args], capture_output=True, text=True)
    text = p.stdout + p.stderr
    print("$ ringside " + " ".join(args) + f"  (exit {p.returncode})\n" + text)
    check(p.returncode == rc and re.search(pattern, text) is not None, f"exit {rc} and /{pattern}/: {' '.join(args)[:100]}")


def rewrite(src, dst, change):
    """A copy of the run folder `src` in `dst`, each rank's events passed through `change`."""
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        with gzip.open(os.path.join(src, name), "rt") as f:
            doc = json.load(f)
        change(doc)
        with open(os.path.join(dst, name.replace(".gz", "")), "w") as f:
            json.dump(doc, f)


def bad():
    out = os.path.join(OUT, "bad.json")
    if os.path.exists(out):
        os.remove(out)
    known = KNOWN[0]
    # Not JSON, and a kernel without its correlation: the file and the event named.
    notjson = os.path.join(OUT, "notjson")
    os.makedirs(notjson, exist_ok=True)
    with open(os.path.join(notjson, "rank0.json"), "w") as f:
        f.write('{"traceEvents": [')
    expect_error(1, r"notjson/rank0\.json: not valid JSON", "calibrate", notjson, "--out", out)

    def drop_correlation(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel":
                del e["args"]["correlation"]
                break
    rewrite(known, os.path.join(OUT, "nocorrelation"), drop_correlation)
    expect_error(1, r"rank0\.pt\.trace\.json: traceEvents\[[0-9]+\]: missing 'args\.correlation'", "calibrate",
                 os.path.join(OUT, "nocorrelation"), "--out", out)
    # A CPU-only run (the gloo fixture): no GPU kernels.
    expect_error(2, r"no GPU kernels \(a CPU-only profile\?\)", "calibrate", os.path.join(FIXTURES, "..", "kineto", "ring2"), "--out", out)
    # Not a Kineto trace at all: a ringside trace.
    plain = os.path.join(OUT, "plain")
    os.makedirs(plain, exist_ok=True)
    with open(os.path.join(plain, "rank0.json"), "w") as f:
        json.dump({"traceEvents": [], "otherData": {}}, f)
    expect_error(1, r"plain/rank0\.json: not a PyTorch profiler \(Kineto\) trace", "calibrate", plain, "--out", out)

    # Without shapes (record_shapes=False) and without NCCL sizes: nothing to fit, and why.
    def no_shapes(doc):
        for e in doc["traceEvents"]:
            for key in ("Input Dims", "Input type", "Concrete Inputs", "In msg nelems", "Out msg nelems"):
                e.get("args", {}).pop(key, None)
            if e.get("cat") == "kernel":
                e["dur"] = 0.5  # and kernels back to back with no queued gaps worth a launch: all one length
    rewrite(known, os.path.join(OUT, "noshapes"), no_shapes)
    expect_error(2, r"nothing to fit.*record_shapes=True", "calibrate", os.path.join(OUT, "noshapes"), "--out", out,
                 "--min-samples", "100000")

    # Shapes missing but NCCL sizes there: the links and the launch gap fitted, the rest reported.
    def shapes_only(doc):
        for e in doc["traceEvents"]:
            if e.get("cat") == "cpu_op" and e.get("name") != "record_param_comms":
                e.get("args", {}).pop("Input Dims", None)
    rewrite(known, os.path.join(OUT, "shapesonly"), shapes_only)
    text = run("calibrate", os.path.join(OUT, "shapesonly"), "--out", os.path.join(OUT, "shapesonly.json"))
    check("no shapes: profile with record_shapes=True" in text, "a run without shapes says so")
    with open(os.path.join(OUT, "shapesonly.json")) as f:
        params = {p["name"]: p for p in json.load(f)["calibration"]["parameters"]}
    check(not params["efficiency.gemm.bf16"]["fitted"] and params["tiers[1] (InfiniBand).efficiency"]["fitted"],
          "without shapes: GEMMs kept, the links still fitted")

    # Another GPU than the base's; an unknown base; an output that is a folder or one of the traces.
    expect_error(2, r"108 SMs, the base profile h100-nvlink's 132", "calibrate", os.path.join(FIXTURES, "hta", "nccl_parser_config"),
                 "--out", out, "--base", "h100-nvlink")
    expect_error(2, r"--hw|not a profile", "calibrate", known, "--out", out, "--base", "no-such-gpu")
    expect_error(2, r"--out", "calibrate", known, "--out", OUT)
    copy = os.path.join(OUT, "copy")
    rewrite(known, copy, lambda doc: None)
    victim = os.path.join(copy, sorted(os.listdir(copy))[0])
    size = os.path.getsize(victim)
    expect_error(2, r"is one of the run's traces", "calibrate", copy, "--out", victim)
    check(os.path.getsize(victim) == size, "the trace named as --out is untouched")
    check(not os.path.exists(out), "no profile written by a refused run")


{"known": known, "loop": loop, "public": public, "bad": bad}[WHAT]()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
