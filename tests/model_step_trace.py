#!/usr/bin/env python3
"""`model --gbs --trace` writes the whole step as `plan --gbs --trace` draws it (issue 61), for CTest.

model_step_trace.py RINGSIDE DIR

1. plan --gbs --trace --json on Llama 3 8B at 32K on 64 H100s, 4 stages; then the winner modeled
   alone, with the command the plan prints for it (its --json's model_command and the row's
   model_flags), and --trace: the
   model's trace is a modeled step (otherData.backend "pipeline stages"), its processes named
   "stage 0" to "stage 3", and each stage's events are the plan's winner's, one for one (name,
   category, stream, start, duration, arguments).
2. The step of the issue (TP 2 x ring 2, PP 4, VP 2, DP 4, GBS 64): 4 stages, each with
   m VP = 16 x 2 forward and as many backward ops (m = GBS / (DP MBS) = 16).
3. A step that does not fit: exit 2, the binding term named, no file written.
Exit 0 when all hold; else each failure on stderr and exit 1.
"""
import json
import os
import shlex
import subprocess
import sys

ringside, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)
    return ok


def run(args):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p


def stages(path):
    """A trace's processes by name, each its X events in order (the fields a viewer reads)."""
    j = json.load(open(path))
    names = {e["pid"]: e["args"]["name"] for e in j["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    events = {}
    for e in j["traceEvents"]:
        if e["ph"] == "X":
            events.setdefault(names[e["pid"]], []).append((e["name"], e["cat"], e["tid"], e["ts"], e["dur"], json.dumps(e.get("args"), sort_keys=True)))
    return j["otherData"], events


# 1. The plan's winner, and the same configuration modeled alone.
plan_trace, plan_json, model_trace = f"{out}/plan.trace.json", f"{out}/plan.json", f"{out}/model.trace.json"
run([ringside, "plan", "--preset", "llama3-8b", "--seq", "32768", "--gpus", "64", "--hw", "h100-nvlink", "--gbs", "64", "--pp", "4",
     "--top", "1", "--json", plan_json, "--trace", plan_trace])
plan = json.load(open(plan_json))["plans"][0]
winner = plan["rows"][0]["name"]
command = shlex.split(plan["model_command"]) + shlex.split(plan["rows"][0]["model_flags"])  # as the plan prints it
check(command[:2] == ["ringside", "model"], f"the plan's model_command: {plan['model_command']}")
printed = run([ringside] + command[1:] + ["--trace", model_trace]).stdout
check("one row per pipeline stage" in printed, "model --gbs --trace does not say it wrote the step's stages")
_, planned = stages(plan_trace)
other, modeled = stages(model_trace)
check(other.get("backend") == "pipeline stages", f"model's trace: backend {other.get('backend')!r}, not a modeled step's")
check(sorted(modeled) == [f"stage {k}" for k in range(4)], f"model's trace: processes {sorted(modeled)}, not stage 0 to 3")
for k in range(4):
    mine, theirs = modeled.get(f"stage {k}", []), planned.get(f"winner {winner}: stage {k}", [])
    check(theirs and mine == theirs, f"stage {k}: model wrote {len(mine)} events, the plan's winner {winner} {len(theirs)}"
          + ("" if len(mine) != len(theirs) else ", not the same ones"))
if not fails:
    print(f"{winner}: {sum(len(v) for v in modeled.values())} events on 4 stages, the plan's winner's one for one")

# 2. The issue's step: m VP forward and backward ops a stage.
issue = f"{out}/issue.trace.json"
run([ringside, "model", "--preset", "llama3-8b", "--seq", "32768", "--hw", "h100-nvlink", "--gbs", "64", "--tp", "2", "--cp", "2",
     "--cp-comm", "p2p", "--pp", "4", "--vp", "2", "--ranks", "4", "--dp", "4", "--zero", "1", "--trace", issue])
other, modeled = stages(issue)
check(other.get("backend") == "pipeline stages" and sorted(modeled) == [f"stage {k}" for k in range(4)],
      f"the issue's step: {sorted(modeled)}, backend {other.get('backend')!r}")
for name, events in sorted(modeled.items()):
    for phase in ("forward", "backward"):
        ops = sum(1 for e in events if json.loads(e[5]).get("phase") == phase)
        check(ops == 16 * 2, f"the issue's step, {name}: {ops} {phase} ops, not m VP = 32")

# 3. A step that does not fit has no timeline: a usage error, no file.
oom = f"{out}/oom.trace.json"
if os.path.exists(oom):
    os.remove(oom)
p = subprocess.run([ringside, "model", "--preset", "llama3-8b", "--seq", "131072", "--hw", "h100-nvlink", "--gbs", "1", "--ranks", "1",
                    "--tp", "1", "--cp", "1", "--trace", oom], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
check(p.returncode == 2, f"a step that does not fit: exit {p.returncode}, not 2")
check("the step does not fit, so it has no timeline to draw: out of memory" in p.stderr and "binding: activations" in p.stderr,
      f"a step that does not fit: {p.stderr.strip()}")
check(not os.path.exists(oom), "a step that does not fit wrote a trace")

for f in fails:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
