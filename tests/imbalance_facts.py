#!/usr/bin/env python3
"""One imbalance everywhere (issue 42): in compare's JSON, each layout's attention-work imbalance
and each modeled strategy's compute imbalance are max / mean of the per-rank values beside them.

  imbalance_facts.py COMPARE_JSON
"""
import json
import sys


def max_over_mean(values):
    mean = sum(values) / len(values)
    return max(values) / mean if mean > 0 else 1.0


def main(path):
    doc = json.load(open(path))
    checked = 0
    for layout, row in doc["ring_work_per_rank"].items():
        want = max_over_mean(row["gflops"])
        assert abs(row["imbalance"] - want) <= 1e-9 * want, (layout, row["imbalance"], want)
        checked += 1
    for s in doc["modeled"]["strategies"]:
        # compute_us is rounded to the ns in the document: compare to that precision.
        want = max_over_mean([r["compute_us"] for r in s["ranks"]])
        assert abs(s["compute_imbalance"] - want) <= 1e-4 * want, (s["strategy"], s["compute_imbalance"], want)
        checked += 1
    assert checked > 0, "nothing to check"
    print(f"imbalance is max / mean in all {checked} places")


if __name__ == "__main__":
    main(sys.argv[1])
