#!/usr/bin/env python3
"""Checks the progress a long ringside command reports on stderr, for CTest.

progress_lines.py [--phase TEXT ...] [--json FILE] -- COMMAND...
Runs COMMAND with RINGSIDE_PROGRESS_INTERVAL=0, where each phase prints a line as it starts and
one as it ends (core/progress.h), and checks:
  - every line on stderr is a progress line: "ringside CMD: WHAT: N of [at most ]M UNIT (P%),
    T so far, LEFT" (LEFT: "time left not known yet", "[at most ]about T left" or "finishing")
    as a phase starts, "ringside CMD: WHAT: done: N of [at most ]M UNIT in T" as it ends;
  - each phase starts at 0, ends with its count, and N never passes M;
  - the phases, in order, begin with the texts given as --phase (each a phase's WHAT's start);
  - stdout holds no progress line, and the --json FILE the command wrote is JSON.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--phase", action="append", default=[])
ap.add_argument("--json")
ap.add_argument("command", nargs=argparse.REMAINDER)
a = ap.parse_args()
command = a.command[1:] if a.command[:1] == ["--"] else a.command
env = dict(os.environ, RINGSIDE_PROGRESS_INTERVAL="0")
p = subprocess.run(command, capture_output=True, text=True, env=env)
fails = []
if p.returncode != 0:
    fails.append(f"exit {p.returncode}: {p.stderr[-2000:]}")
duration = r"(?:\d+\.\d s|\d+ s|\d+ min \d\d s)"
start = re.compile(rf"^ringside [a-z ]+: (?P<what>[^:]+): (?P<done>\d+) of (?:at most )?(?P<total>\d+) (?P<unit>[a-zA-Z][^()]*) "
                   rf"\((?P<pct>\d+)%\), {duration} so far, (?:time left not known yet|(?:at most )?about {duration} left|finishing)$")
end = re.compile(rf"^ringside [a-z ]+: (?P<what>[^:]+): done: (?P<done>\d+) of (?:at most )?(?P<total>\d+) (?P<unit>.+) in {duration}$")
phases = []  # (what, started, ended count)
for line in p.stderr.splitlines():
    if m := start.match(line):
        if int(m["done"]) != 0:
            fails.append(f"a phase that starts at {m['done']}: {line}")
        if phases and phases[-1][2] is None:
            fails.append(f"{m['what']} starts before {phases[-1][0]} ends")
        phases.append([m["what"], int(m["total"]), None])
    elif m := end.match(line):
        if not phases or phases[-1][0] != m["what"] or phases[-1][2] is not None:
            fails.append(f"an end without its start: {line}")
            continue
        phases[-1][2] = int(m["done"])
        if int(m["done"]) > int(m["total"]):
            fails.append(f"more done than the total: {line}")
    else:
        fails.append(f"not a progress line on stderr: {line!r}")
for what, total, done in phases:
    if done is None:
        fails.append(f"{what}: started, never ended")
        continue
    print(f"{what}: {done} of {total}")
names = [what for what, _, _ in phases]
at = 0
for want in a.phase:
    while at < len(names) and not names[at].startswith(want):
        at += 1
    if at == len(names):
        fails.append(f"no phase {want!r} (in order) among {names}")
        break
    at += 1
for line in p.stdout.splitlines():
    if start.match(line) or end.match(line):
        fails.append(f"a progress line on stdout: {line}")
if a.json:
    try:
        json.load(open(a.json))
    except (OSError, ValueError) as e:
        fails.append(f"--json {a.json}: {e}")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
