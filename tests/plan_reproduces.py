#!/usr/bin/env python3
"""Checks that `ringside model` reproduces rows of a `ringside plan --json` file, for CTest.

plan_reproduces.py RINGSIDE FILE [--need KIND ...] [--first N] [--out DIR]
  RINGSIDE  the ringside binary: each chosen row's command, the plan's model_command with the
            row's model_flags (what the plan prints), is run with it, with --json
  --need    a kind of row that must be among the ranked rows and is checked (the best placed of
            its kind): dp-pp or pp-dp (the outer order of a step), cp-tp (the group's inner order),
            vp (VP > 1), zero0, zero2, zero3 (the ZeRO stage), selective, full (the recompute mode)
  --first   also the first N ranked rows (default 1: the winner)
A step plan's row (--gbs) must come back from `model --gbs` with the same step time and tokens/s per
GPU, a layer plan's with its layer's time (/layer/total_s) times the plan's L equal to the row's
step, each to 1e-6 relative, on every profile's plan (its model_command names its --hw).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("ringside")
ap.add_argument("file")
ap.add_argument("--need", action="append", default=[])
ap.add_argument("--first", type=int, default=1)
a = ap.parse_args()
js = json.load(open(a.file))
step = "gbs" in js


def kind_of(row, kind):
    if kind in ("dp-pp", "pp-dp"):
        return step and row["pp"] > 1 and row["dp"] > 1 and row["order"].endswith(kind)
    if kind == "cp-tp":
        return row["tp"] > 1 and row["cp"] > 1 and row["order"].startswith("cp-tp")
    if kind == "vp":
        return step and row["vp"] > 1
    if kind.startswith("zero"):
        return step and row["zero"] == int(kind[4:])
    if kind in ("selective", "full"):
        return row["recompute"] == kind
    raise SystemExit(f"unknown --need {kind}")


fails = []
with tempfile.TemporaryDirectory() as tmp:
    for plan in js["plans"]:
        ranked = [r for r in plan["rows"] if r["status"] == "ranked"]
        chosen = [(f"#{i + 1}", r) for i, r in enumerate(ranked[: a.first])]
        for kind in a.need:
            rows = [r for r in ranked if kind_of(r, kind)]
            if not rows:
                fails.append(f"{plan['hardware']['name']}: no ranked row is {kind}")
                continue
            chosen.append((kind, rows[0]))
        for why, row in chosen:
            why = f"{plan['hardware']['name']} {why}"
            command = shlex.split(plan["model_command"]) + shlex.split(row["model_flags"])
            assert command[:2] == ["ringside", "model"], command
            out = os.path.join(tmp, "model.json")
            p = subprocess.run([a.ringside] + command[1:] + ["--json", out], capture_output=True, text=True)
            shown = " ".join(command)
            if p.returncode != 0:
                fails.append(f"{why} {row['name']}: `{shown}` exited {p.returncode}: {p.stderr.strip()}")
                continue
            m = json.load(open(out))
            if step:
                got = {"step_s": m["step"]["step_s"], "tokens_per_s_per_gpu": m["step"]["tokens_per_s_per_gpu"]}
                if m["step"]["name"] != row["name"]:
                    fails.append(f"{why}: model named the step {m['step']['name']}, the plan {row['name']}")
            else:
                got = {"step_s": m["layer"]["total_s"] * js["layers"]}
            for key, value in got.items():
                if abs(value / row[key] - 1) > 1e-6:
                    fails.append(f"{why} {row['name']}: {key} {row[key]} in the plan, {value} from `{shown}`")
            print(f"{why} {row['name']}: " + ", ".join(f"{k} {row[k]:.9g} = {v:.9g}" for k, v in got.items()))
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
