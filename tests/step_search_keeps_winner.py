#!/usr/bin/env python3
"""Issue 61: the whole-step planner's default search keeps the winner.

For each case, runs `ringside plan ... --gbs N --json` twice, by default and with --exhaustive
(every group that fits dry-run), and asserts the two winners are the same row: the same name and
the same step time (to the printed 0.01 ms). The default search prunes groups by estimates; it
may skip a group only when that group could not have won.

usage: step_search_keeps_winner.py RINGSIDE OUTDIR CASE...   (CASE: "preset seq gpus gbs hw")
"""
import json
import os
import subprocess
import sys


def winner(ringside, out, args, exhaustive):
    path = os.path.join(out, "keeps-winner-%s%s.json" % ("-".join(args).replace("/", "_"), "-exh" if exhaustive else ""))
    cmd = [ringside, "plan"] + args + (["--exhaustive"] if exhaustive else []) + ["--json", path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path) as f:
        js = json.load(f)
    rows = [r for r in js["plans"][0]["rows"] if r["status"] == "ranked"]
    best = rows[0]
    return best["name"], best["step_s"], js["stats"]


def main():
    ringside, out, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    failed = 0
    for case in cases:
        preset, seq, gpus, gbs, hw = case.split()
        args = ["--preset", preset, "--seq", seq, "--gpus", gpus, "--gbs", gbs, "--hw", hw]
        d_name, d_step, d_stats = winner(ringside, out, args, False)
        e_name, e_step, e_stats = winner(ringside, out, args, True)
        same = d_name == e_name and abs(d_step - e_step) <= 1e-5 * e_step
        print("%s %-28s default %s %.3f s (%d dry runs), exhaustive %s %.3f s (%d dry runs)" %
              ("ok  " if same else "MISS", case, d_name, d_step, d_stats["dry_runs"], e_name, e_step, e_stats["dry_runs"]))
        failed += not same
    if failed:
        print("%d of %d cases: the default search dropped the winner" % (failed, len(cases)))
        return 1
    print("all %d cases: the default's winner is --exhaustive's" % len(cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
