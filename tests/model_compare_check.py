#!/usr/bin/env python3
"""Checks the table `ringside model --compare` prints against values found without it.

Usage: model_compare_check.py OUTPUT MEASURED_JSON MODEL_JSON MODEL_TRACE [--hw NAME]

  OUTPUT         the stdout of `ringside model --compare RUN <configuration>`
  MEASURED_JSON  `tests/fixtures/kineto/check_metrics.py --by-phase RUN`: the run's per-phase
                 figures (its rules P1-P5), from the trace files with Python's json module
  MODEL_JSON     `ringside model <configuration> --json`: the model's report, slowest rank
  MODEL_TRACE    `ringside model <configuration> --trace`: the modeled timeline, split here by
                 phase from the file (args.phase; tid 0 compute, tids 1.. comm lanes), each
                 compute op without the launch gap before its kernel (the profile's launch_us)

Every printed figure (4 significant digits) must be within 0.1% of the value found here, every
ratio within 0.1% of measured / modeled; the measured-only phases must show "-" as modeled.
Standard library only.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "kineto"))
from check_metrics import length, union  # noqa: E402  (the same interval rules as the measured side)

ROW = re.compile(r"^  (.{18}) (time|compute|comm|window)\s+(\S+(?: \S+)?)\s+(\S+(?: \S+)?)\s+(\S+)$")
UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
WORK = {"attention", "gemm", "norm", "elementwise", "memory", "other"}  # compute-stream work (trace.h)
CONTAINERS = {"phase", "sublayer", "ring_step", "collective"}


def us(text):
    """'3.421 ms' -> 3421.0 (us); '-' -> None."""
    if text == "-":
        return None
    value, unit = text.split()
    return float(value) * UNITS[unit]


def parse(output):
    """{(phase, figure): (measured_us, modeled_us, ratio)} from the table's rows."""
    rows, phase = {}, None
    header = False
    for line in output.splitlines():
        if "measured (the run's clock)" in line and "measured/modeled" in line:
            header = True
            continue
        m = ROW.match(line) if header else None
        if not m:
            continue
        if m.group(1).strip():
            phase = m.group(1).strip()
        ratio = None if m.group(5) == "-" else float(m.group(5))
        rows[(phase, m.group(2))] = (us(m.group(3)), us(m.group(4)), ratio)
    return rows


def modeled_phases(path):
    """Per phase, the largest over ranks of span, compute and comm (us) of the modeled trace; and
    the whole's compute. Compute without the launch gap the model charges before each kernel
    (otherData's profile, efficiency.memory.launch_us: every op here is one kernel), as a
    profiler's kernels count it."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i")]
    other = doc.get("otherData", {})
    launch_ns = 0 if other.get("model_efficiency") == "ideal" else \
        round(1000 * other.get("hardware", {}).get("efficiency", {}).get("memory", {}).get("launch_us", 0))
    whole = {}  # pid -> compute intervals
    per = {}  # (pid, phase) -> {"span": [...], "compute": [...], "comm": [...]}
    for e in events:
        args = e.get("args", {})
        phase = args.get("phase", "")
        if e.get("cat") == "phase" and e["name"] != phase:
            continue
        start = round(e["ts"] * 1000)
        iv = (start, start + round(e.get("dur", 0) * 1000))
        d = per.setdefault((e["pid"], phase), {"span": [], "compute": [], "comm": []})
        if e.get("cat") == "phase" or e.get("cat") not in CONTAINERS:
            d["span"].append(iv)
        if e["tid"] == 0 and e.get("cat") in WORK and e["ph"] == "X":
            kernel = (min(iv[0] + launch_ns, iv[1]), iv[1])
            d["compute"].append(kernel)
            whole.setdefault(e["pid"], []).append(kernel)
        elif e["tid"] != 0 and e["ph"] == "X":
            d["comm"].append(iv)
    out = {}
    for (pid, phase), d in per.items():
        span = (max(e for _, e in d["span"]) - min(s for s, _ in d["span"])) if d["span"] else 0
        r = out.setdefault(phase or "(no phase)", {"time": 0.0, "compute": 0.0, "comm": 0.0})
        for k, v in (("time", span), ("compute", length(union(d["compute"]))), ("comm", length(union(d["comm"])))):
            r[k] = max(r[k], v / 1000)
    return out, max((length(union(ivs)) for ivs in whole.values()), default=0) / 1000


def close(got, want, what):
    if want is None or got is None:
        if got is not want:
            raise SystemExit(f"{what}: printed {got}, expected {want}")
        return
    if abs(got - want) > 1e-3 * abs(want) + 1e-3:
        raise SystemExit(f"{what}: printed {got}, expected {want}")


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    output_path, measured_path, model_json_path, model_trace_path = sys.argv[1:5]
    hw = sys.argv[sys.argv.index("--hw") + 1] if "--hw" in sys.argv else None
    output = open(output_path, encoding="utf-8").read()
    rows = parse(output)
    if not rows:
        raise SystemExit("no table rows in the output")
    if hw and f"modeled ({hw})" not in output:
        raise SystemExit(f"the modeled column does not name {hw}")
    measured = json.load(open(measured_path, encoding="utf-8"))
    report = json.load(open(model_json_path, encoding="utf-8"))
    modeled, modeled_compute = modeled_phases(model_trace_path)

    # The measured side: check_metrics.py --by-phase's figures, phase by phase.
    want_measured = {(p or "(no phase)"): {"time": f["span_us"], "compute": f["compute_us"], "comm": f["comm_us"]}
                     for p, f in measured["by_phase"].items()}
    phases = set(want_measured) | set(modeled)
    printed = {p for p, _ in rows} - {"the whole"}
    if printed != phases:
        raise SystemExit(f"phases printed {sorted(printed)}, expected {sorted(phases)}")
    order = [p for p, _ in rows]
    if order[:2] != ["forward", "forward"] or "backward" not in order:
        raise SystemExit(f"forward and backward do not lead the table: {order}")
    checked = 0
    for p in sorted(phases):
        for fig in ("time", "compute", "comm"):
            got_m, got_w, got_r = rows[(p, fig)]
            want_m = want_measured[p][fig] if p in want_measured else None
            want_w = modeled[p][fig] if p in modeled else None
            close(got_m, want_m, f"{p} {fig} measured")
            close(got_w, want_w, f"{p} {fig} modeled")
            want_r = want_m / want_w if want_m is not None and want_w else None
            close(got_r, want_r, f"{p} {fig} measured/modeled")
            checked += 1
            print(f"ok  {p:16} {fig:8} measured {want_m} us, modeled {want_w} us, ratio {want_r}")

    # The whole: check_metrics.py's window and per-rank figures; the model's from its --json
    # (the slowest rank's window, compute and comm).
    whole = measured["whole"]
    scope = report["attention"] if "layer" not in report else report["layer"]
    want = {"window": (whole["window_us"], scope["total_s"] * 1e6), "compute": (whole["compute_us"], modeled_compute),
            "comm": (whole["comm_us"], report["comm_s"] * 1e6)}
    for fig, (want_m, want_w) in want.items():
        got_m, got_w, got_r = rows[("the whole", fig)]
        close(got_m, want_m, f"the whole {fig} measured")
        close(got_w, want_w, f"the whole {fig} modeled")
        close(got_r, want_m / want_w, f"the whole {fig} measured/modeled")
        checked += 1
        print(f"ok  {'the whole':16} {fig:8} measured {want_m} us, modeled {want_w} us, ratio {want_m / want_w}")
    print(f"model_compare_check: {checked} rows as expected")


if __name__ == "__main__":
    main()
