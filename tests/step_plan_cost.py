#!/usr/bin/env python3
"""Checks what a whole-step `ringside plan --gbs ... --json` file says its search cost, for CTest.

step_plan_cost.py FILE --pipelines-below N
  The pipelines the search simulated (/stats/pipelines) are fewer than N: each distinct pipeline
  once (model/pipeline.h's PipelineMemo), where the planner before issue 57 simulated one for
  every configuration that fits, ZeRO 0, 1 and 2 alike, and again for every one it dry-ran.
  Every lookup is either simulated or reused: the pipelines simulated and reused add up to the
  configurations that needed one, at least as many as the ranked and bounded rows.
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--pipelines-below", type=int, required=True)
a = ap.parse_args()
st = json.load(open(a.file))["stats"]
fails = []
simulated, reused = st["pipelines"], st["pipelines_reused"]
fitting = sum(1 for p in json.load(open(a.file))["plans"] for r in p["rows"] if r["status"] in ("ranked", "bounded"))
print(f"{simulated} pipelines simulated, {reused} reused, {st['pipeline_ops']:.3g} ops; {fitting} configurations that fit")
if simulated >= a.pipelines_below:
    fails.append(f"{simulated} pipelines simulated, not fewer than {a.pipelines_below}")
if simulated + reused < fitting:
    fails.append(f"{simulated} + {reused} pipelines for {fitting} configurations that fit: some were not simulated at all")
if not 0 < st["pipeline_ops"]:
    fails.append(f"pipeline_ops {st['pipeline_ops']}")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
