#!/usr/bin/env python3
"""Holds `ringside trace-stats FOLDER --json` to tests/fixtures/kineto/check_metrics.py, an
independent computation from the fixture's JSON (standard library only, no ringside code).

Usage: check_kineto_metrics.py RINGSIDE FIXTURE_FOLDER...

Per rank, compute, comm, overlap and exposed comm must agree to 1e-6 relative. The window
differs by definition: check_metrics.py takes each rank's own ProfilerStep (widened to its GPU
work on a GPU rank); ringside one window for the run, from the first rank's start to the last
rank's end (so idle also counts the wait for the other ranks). So the window must equal the
hull of check_metrics.py's windows, and idle = window - compute - exposed.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def close(a, b, what):
    if abs(a - b) > 1e-6 * max(abs(a), abs(b), 1e-9) and abs(a - b) > 1e-9:
        raise SystemExit(f"{what}: ringside {a!r} against check_metrics.py {b!r}")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def cpu_window(folder, name):
    """A CPU rank's window as check_metrics.py takes it: its ProfilerStep spans, in integer ns."""
    events = load(os.path.join(folder, name))["traceEvents"]
    spans = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events
             if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))]
    return min(s for s, _ in spans), max(e for _, e in spans)


def main():
    ringside, folders = sys.argv[1], sys.argv[2:]
    for folder in folders:
        ref = json.loads(subprocess.check_output([sys.executable, os.path.join(HERE, "fixtures/kineto/check_metrics.py"), folder]))
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "stats.json")
            # Clocks as they are: check_metrics.py does not shift ranks, so neither may ringside here.
            subprocess.check_call([ringside, "trace-stats", folder, "--align", "none", "--json", out], stdout=subprocess.DEVNULL)
            with open(out) as f:
                got = json.load(f)
        assert len(got) == 1, "one run"
        ranks = {r["rank"]: r for r in got[0]["ranks"]}
        assert sorted(ranks) == sorted(r["rank"] for r in ref["ranks"]), "the same ranks"
        lo, hi = None, None
        for r in ref["ranks"]:
            mine = ranks[r["rank"]]
            for key in ("compute_us", "comm_us", "overlap_us", "exposed_comm_us"):
                close(mine[key], r[key], f"{os.path.basename(folder)} rank {r['rank']} {key}")
            if "window_intervals_us" in r:
                s, e = r["window_intervals_us"][0][0] * 1000, r["window_intervals_us"][-1][1] * 1000
            else:
                s, e = cpu_window(folder, r["file"])
            lo, hi = (s, e) if lo is None else (min(lo, s), max(hi, e))
        for rank, mine in ranks.items():
            close(mine["window_us"], (hi - lo) / 1000, f"{os.path.basename(folder)} rank {rank} window (the runs' hull)")
            close(mine["idle_us"], mine["window_us"] - mine["compute_us"] - mine["exposed_comm_us"],
                  f"{os.path.basename(folder)} rank {rank} idle")
        print(f"{os.path.basename(folder)}: {len(ranks)} ranks agree with check_metrics.py "
              f"(compute, comm, overlap, exposed to 1e-6; window {got[0]['window_us']:.3f} us, the hull of theirs)")


if __name__ == "__main__":
    main()
