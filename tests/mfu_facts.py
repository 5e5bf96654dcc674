#!/usr/bin/env python3
"""Checks the MFU of every ranked row of a whole-step plan (`ringside plan --gbs ... --json`)
against a count of its own, for CTest (issue 57: MFU counts the FLOPs the mask leaves).

mfu_facts.py FILE
  For the plan's layer (its config: causal, documents, window), counts the (query, key) pairs the
  mask leaves row by row (a query at position i of a document starting at a sees keys
  [max(a, i - W + 1), i] causal, [max(a, i - W + 1), min(end, i + W - 1)] otherwise; no mask and
  causal: s^2 / 2, FlashAttention's count), then checks each ranked row's MFU equals tokens/s x
  3 (L (2 (h (H + 2 Hkv) d + H d h + h F + f h) + 4 H d pairs / s) + 2 h V) / peak, and is in
  (0, 1]. Exits 1 naming each row that is not.
"""
import json
import sys

js = json.load(open(sys.argv[1]))
c = js["config"]
s, window, causal = c["s"], c.get("window", 0), c["causal"]
docs = c.get("docs", [s])


def row_pairs(n):
    if not window and len(docs) == 1:
        return n * n / 2 if causal else n * n
    total = 0
    for i in range(n):
        lo = max(0, i - window + 1) if window else 0
        hi = i if causal else (min(n - 1, i + window - 1) if window else n - 1)
        total += hi - lo + 1
    return total


pairs = sum(row_pairs(n) for n in docs) if (window or len(docs) > 1) else row_pairs(s)
d = c["h"] // c["H"]
F = 2 * c["f"] if c["mlp"] == "swiglu" else c["f"]
gemms = 2 * (c["h"] * (c["H"] + 2 * c["Hkv"]) * d + c["H"] * d * c["h"] + c["h"] * F + c["f"] * c["h"])
flops_per_token = 3 * (js["layers"] * (gemms + 4 * c["H"] * d * pairs / s) + 2 * c["h"] * js["vocab"])
fails, checked = [], 0
for plan in js["plans"]:
    peak = plan["hardware"]["peak_flops"][js["dtype"]]
    for r in plan["rows"]:
        if r["status"] != "ranked":
            continue
        want = r["tokens_per_s_per_gpu"] * flops_per_token / peak
        checked += 1
        if not 0 < r["mfu"] <= 1 or abs(r["mfu"] / want - 1) > 1e-9:
            fails.append(f"{r['name']}: MFU {r['mfu']}, want {want} (in (0, 1])")
print(f"{checked} ranked rows; pairs {pairs:.6g} of s^2 = {s * s:.6g} ({pairs / (s * s):.4f})")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails or checked == 0 else 0)
