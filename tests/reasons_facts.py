#!/usr/bin/env python3
"""Issue 61, reasons that cover time: checks a plan's --json (layer or whole step) against its
own per-class numbers, computed here independently of the planner's words.

  every ranked row  its classes (time_by_class) add up to its step time; a layer plan's exposed
                    CP + TP + grads add up to its exposed_s (the old single column)
  every ranked row  but the winner: its "versus" names the class in which it loses most to #1,
                    the largest of (row - winner) over the classes, with that many ms
  the winner        "wins by" the largest class of (runner-up - winner)
  --runner-up NAME  the verdict's runner-up is NAME and its sentence names the class (--class)

Usage: reasons_facts.py PLAN.json [--runner-up NAME --class CLASS]
"""
import argparse
import json
import sys

# The classes in the planner's order (model/time_parts.h: TimeClass), their --json keys and words.
CLASSES = [
    ("attention_s", "attention kernels"), ("gemms_s", "GEMMs"), ("memory_bound_s", "memory-bound ops"),
    ("launches_host_s", "launches and host issue"), ("recompute_s", "recompute"), ("idle_s", "idle"),
    ("exposed_cp_s", "exposed CP"), ("exposed_tp_s", "exposed TP"), ("exposed_grads_s", "exposed grads"),
    ("cp_waits_s", "waiting on CP peers"), ("tp_waits_s", "waiting on TP peers"),
    ("grads_waits_s", "waiting in the gradient all-reduce"), ("bubble_s", "pipeline bubble"),
    ("exposed_pp_s", "exposed PP"), ("exposed_dp_s", "exposed DP"), ("optimizer_s", "optimizer"),
    ("stage_rest_s", "embedding, head and gathers"),
]


def largest(loser, winner):
    """The class in which `loser` loses most to `winner` (ties: the first), and by how much."""
    best = None
    for key, words in CLASSES:
        by = loser[key] - winner[key]
        if best is None or by > best[2]:
            best = (key, words, by)
    return best


def ms(seconds):
    """format_ns's text of a time (core/units.h)."""
    ns = seconds * 1e9
    if abs(ns) < 1e3:
        return "%.0f ns" % ns
    if abs(ns) < 1e6:
        return "%.1f us" % (ns / 1e3)
    if abs(ns) < 1e9:
        return "%.2f ms" % (ns / 1e6)
    return "%.3f s" % (ns / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plan")
    ap.add_argument("--runner-up")
    ap.add_argument("--class", dest="cls")
    a = ap.parse_args()
    doc = json.load(open(a.plan))
    failures = []
    checked = 0
    for plan in doc["plans"]:
        rows = [r for r in plan["rows"] if r["status"] == "ranked"]
        step = "pipeline_s" in rows[0]
        for r in rows:
            t = r["time_by_class"]
            total = sum(t[k] for k, _ in CLASSES)
            if abs(total - r["step_s"]) > 1e-6 * r["step_s"]:
                failures.append("%s: classes sum to %r s, the step is %r s" % (r["name"], total, r["step_s"]))
            if not step:
                split = t["exposed_cp_s"] + t["exposed_tp_s"] + t["exposed_grads_s"]
                if abs(split - r["exposed_s"]) > 1e-9 + 1e-9 * r["exposed_s"]:
                    failures.append("%s: CP + TP + grads = %r s, exposed_s %r s" % (r["name"], split, r["exposed_s"]))
        win = rows[0]["time_by_class"]
        for r in rows[1:]:
            key, words, by = largest(r["time_by_class"], win)
            want = "loses %s of %s to #1 (" % (ms(by), words) if by > 0 else "the same time as #1 in every class"
            if not r["versus"].startswith(want):
                failures.append("%s: versus %r, the numbers say %r" % (r["name"], r["versus"], want))
            checked += 1
        if a.runner_up:
            second = next(r for r in rows if r["name"] == a.runner_up)
            key, words, by = largest(second["time_by_class"], win)
            if words != a.cls:
                failures.append("the runner-up %s loses most in %s (%s), not %s" % (a.runner_up, words, ms(by), a.cls))
            sentence = "The runner-up (the best "
            verdict = " ".join(plan["verdict"].split())
            if sentence not in verdict or (a.runner_up + ",") not in verdict:
                failures.append("the verdict names no runner-up %s: %s" % (a.runner_up, verdict))
            elif ("it loses %s of %s to the winner (" % (ms(by), words)) not in verdict:
                failures.append("the verdict does not say the runner-up loses %s of %s: %s" % (ms(by), words, verdict))
            if not rows[0]["versus"].startswith("wins by %s of %s over the runner-up %s (" % (ms(by), words, a.runner_up)):
                failures.append("the winner's versus: %r" % rows[0]["versus"])
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("reasons facts hold: %d rows' classes add up, %d rows name their largest difference from #1" %
          (sum(len([r for r in p["rows"] if r["status"] == "ranked"]) for p in doc["plans"]), checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())
