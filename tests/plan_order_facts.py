#!/usr/bin/env python3
"""Issue 60: a whole-step plan of several systems gives each system the same answer, whatever
order --hw lists them in (the search's estimates were the first profile's: Llama 3 70B at 256K on
64 GPUs ranked h100-nvlink's ring8 pp2 first alone or listed first, ulysses4xring4 second).

    plan_order_facts.py A.json B.json   (the same plan, --hw in two orders)
"""
import json
import sys


def winners(path):
    out = {}
    for plan in json.load(open(path))["plans"]:
        rows = [r for r in plan["rows"] if r["status"] == "ranked"][:3]
        out[plan["hardware"]["name"]] = [(r["name"], round(r["tokens_per_s_per_gpu"], 6)) for r in rows]
    return out


a, b = winners(sys.argv[1]), winners(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
bad = [name for name in a if a[name] != b[name]]
for name in bad:
    print(f"{name}: {a[name]} in one order, {b[name]} in the other")
for name in a:
    print(f"{name}: {a[name][0][0]} at {a[name][0][1]:.0f} tokens/s per GPU in both orders")
sys.exit(1 if bad else 0)
