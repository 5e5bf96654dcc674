#!/usr/bin/env python3
"""Checks that ranks sharing this machine's memory fit in their share of it, for CTest (issue 57).

shared_memory_facts.py model RANKS   reads `ringside model --gbs ... --hw this-machine` output on
    stdin: its "memory per rank: the RANKS ranks share this machine's A, B each" line has B = A /
    RANKS, and the step's verdict holds its memory against B ("needs X of B", or "X of B" when it
    fits, with X <= B).
shared_memory_facts.py plan FILE RANKS   reads `ringside plan --gbs ... --hw this-machine --json`:
    each profile's memory is its share (the description says "shared by RANKS ranks: B each"),
    and every ranked row's total_bytes is within it.
"""
import json
import re
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def size(text):
    v, u = text.split()
    return float(v) * UNITS[u]


def close(a, b):  # the printed sizes have 2 decimals
    return abs(a - b) <= 0.006 * max(a, b)


fails = []
if sys.argv[1] == "model":
    ranks, out = int(sys.argv[2]), sys.stdin.read()
    m = re.search(r"memory per rank: the (\d+) ranks share this machine's ([\d.]+ \w+), ([\d.]+ \w+) each", out)
    if not m:
        sys.exit("FAIL: no 'memory per rank' line")
    if int(m.group(1)) != ranks or not close(size(m.group(3)), size(m.group(2)) / ranks):
        fails.append(f"share {m.group(3)} is not {m.group(2)} / {ranks}")
    share = size(m.group(3))
    oom = re.search(r"out of memory: needs ([\d.]+ \w+) of ([\d.]+ \w+)", out)
    fit = None if oom else re.search(r"memory of stage \d+: ([\d.]+ \w+) \([\d.]+%\) = .* of ([\d.]+ \w+)", out)
    got = oom or fit
    if not got or not close(size(got.group(2)), share):
        fails.append("the step's verdict is not against the share")
    elif oom and not size(oom.group(1)) > share or fit and not size(fit.group(1)) <= share:
        fails.append(f"verdict {got.group(0)} against a share of {m.group(3)}")
    print(f"share {m.group(3)} of {m.group(2)}; {got.group(0) if got else '?'}")
else:
    js, ranks = json.load(open(sys.argv[2])), int(sys.argv[3])
    for plan in js["plans"]:
        hw = plan["hardware"]
        if f"shared by {ranks} ranks" not in hw["description"]:
            fails.append(f"{hw['name']}: the description does not say the memory is shared: {hw['description']}")
        ranked = [r for r in plan["rows"] if r["status"] == "ranked"]
        for r in ranked:
            m = r["memory"]
            if m["total_bytes"] > m["capacity_bytes"]:
                fails.append(f"{r['name']}: {m['total_bytes']} bytes ranked in a share of {m['capacity_bytes']}")
            if abs(m["capacity_bytes"] - hw["memory_GB"] * 1e9) > 1:
                fails.append(f"{r['name']}: capacity {m['capacity_bytes']}, the profile's share {hw['memory_GB'] * 1e9}")
        print(f"{hw['name']}: {len(ranked)} ranked rows, each within {hw['memory_GB']:.3f} GB: {hw['description']}")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
