#!/usr/bin/env python3
"""Holds plan's, plan --max-seq's and model --gbs's memory to one count (issue 61), for CTest.

memory_count_facts.py RINGSIDE plan ARGS...
    runs `RINGSIDE plan ARGS... --json F` (a layer plan); for its first three ranked tp-cp rows,
    runs `ringside model` with the row's flags at --gbs 1 --pp 1 --dp 1 --zero 3 (the layer plan's
    count: the group alone, ZeRO 3 over CP) and checks the step's memory is the row's, byte for
    byte, in the same words (memory_text).
memory_count_facts.py RINGSIDE max-seq ARGS...
    runs `RINGSIDE plan ARGS... --max-seq --json F`; for every cell that fits, runs its
    model_command (model --gbs at its s) and checks the step fits with the cell's memory, and at
    s + its unit does not fit.
"""
import json
import os
import subprocess
import sys
import tempfile


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def model_step(ringside, words):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "model.json")
        text = run([ringside, "model"] + words + ["--json", out])
        return json.load(open(out))["step"], text


def main():
    ringside, kind, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    fails = []
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.json")
        run([ringside, "plan"] + args + (["--max-seq"] if kind == "max-seq" else []) + ["--json", out])
        js = json.load(open(out))
    if kind == "plan":
        plan = js["plans"][0]
        command = plan["model_command"].split()[2:]  # after "ringside model"
        rows = [r for r in plan["rows"] if r["status"] == "ranked" and r["order"] == "tp-cp"][:3]
        if not rows:
            fails.append("no ranked tp-cp row")
        for r in rows:
            flags = r["model_flags"].replace("--order tp-cp ", "--order tp-cp-pp-dp ").split()
            step, _ = model_step(ringside, command + flags + ["--gbs", "1", "--pp", "1", "--dp", "1", "--zero", "3"])
            mine, theirs = r["memory"], step["memory"]
            if abs(mine["total_bytes"] - theirs["total_bytes"]) > 1e-9 * theirs["total_bytes"] or mine["text"] != theirs["text"]:
                fails.append(f"{r['name']}: plan {mine['text']}, model --gbs {theirs['text']}")
            print(f"{r['name']}: plan and model --gbs both {theirs['text']}")
    else:
        for plan in js["plans"]:
            for c in plan["cells"]:
                if not c["fits"]:
                    continue
                words = c["model_command"].split()[2:]
                step, _ = model_step(ringside, words)
                if step["status"] != "ranked" or step["memory"]["text"] != c["memory"]["text"]:
                    fails.append(f"{c['split']} at s = {c['s']}: model --gbs {step['status']}, {step['memory']['text']}; "
                                 f"max-seq {c['memory']['text']}")
                at = words.index("--seq")
                words[at + 1] = str(c["s"] + c["unit"])
                beyond, _ = model_step(ringside, words)
                if beyond["status"] != "out_of_memory":
                    fails.append(f"{c['split']} at s + unit = {c['s'] + c['unit']}: {beyond['status']}, not out of memory")
                print(f"{c['recompute']} ZeRO {c['zero']}: {c['split']} fits at s = {c['s']} ({c['memory']['text']}), "
                      f"not at {c['s'] + c['unit']} ({beyond['memory']['text']})")
    for f in fails:
        print("FAIL:", f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
