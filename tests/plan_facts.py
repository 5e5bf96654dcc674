#!/usr/bin/env python3
"""Checks facts about a `ringside plan --json` file, for CTest.

plan_facts.py FILE [--winner NAME] [--place NAME:RANK:STEP ...] [--ranked-tp T] [--ranked-recompute MODE]
  --winner            the first profile's first ranked row is NAME
  --place             NAME is ranked RANK (from 1) on the first profile, its step STEP seconds
                      to the 2 decimals given (the README's figures)
  --ranked-tp         every ranked row of the first profile has TP degree T
  --ranked-recompute  every ranked row of the first profile recomputes MODE
Also checks every plan's rows: ranked ones first, by step time, each with a reason; rejected
ones with a reason naming the rule or the binding term.
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--winner")
ap.add_argument("--place", action="append", default=[])
ap.add_argument("--ranked-tp", type=int)
ap.add_argument("--ranked-recompute")
a = ap.parse_args()
js = json.load(open(a.file))
fails = []
for plan in js["plans"]:
    rows = plan["rows"]
    ranked = [r for r in rows if r["status"] == "ranked"]
    if rows[: len(ranked)] != ranked:
        fails.append(f"{plan['hardware']['name']}: a rejected row before a ranked one")
    times = [r["step_s"] for r in ranked]
    if times != sorted(times):
        fails.append(f"{plan['hardware']['name']}: ranked rows not in step-time order")
    for r in rows:
        if not r["reason"]:
            fails.append(f"{r['name']}: no reason")
        if r["status"] == "out_of_memory" and ("binding" not in r["reason"] or r["peak_bytes"] <= r["capacity_bytes"]):
            fails.append(f"{r['name']}: out of memory without a binding term or above capacity")
        if r["status"] == "ranked" and r["peak_bytes"] > r["capacity_bytes"]:
            fails.append(f"{r['name']}: ranked but over capacity")
first = [r for r in js["plans"][0]["rows"] if r["status"] == "ranked"]
if a.winner and (not first or first[0]["name"] != a.winner):
    fails.append(f"winner {first[0]['name'] if first else None}, expected {a.winner}")
for place in a.place:
    name, rank, step = place.rsplit(":", 2)
    at = [i for i, r in enumerate(first) if r["name"] == name]
    if not at or at[0] + 1 != int(rank) or f"{first[at[0]]['step_s']:.2f}" != step:
        got = f"#{at[0] + 1}, {first[at[0]]['step_s']:.2f} s" if at else "not ranked"
        fails.append(f"{name}: {got}, expected #{rank}, {step} s")
if a.ranked_tp is not None and any(r["tp"] != a.ranked_tp for r in first):
    fails.append(f"a ranked row with tp != {a.ranked_tp}")
if a.ranked_recompute and any(r["recompute"] != a.ranked_recompute for r in first):
    fails.append(f"a ranked row with recompute != {a.ranked_recompute}")
for f in fails:
    print("plan_facts:", f)
print(f"plan_facts: {len(first)} ranked rows checked, {len(fails)} failures")
sys.exit(1 if fails else 0)
