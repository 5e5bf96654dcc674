#!/usr/bin/env python3
"""Checks facts about a whole-step `ringside plan --gbs ... --json` file, for CTest.

step_plan_facts.py FILE --published NAME --gpus P --tokens T [--row NAME:TOKENS:MFU ...]
  --published  the configuration a published run used: it is ranked (dry-run and fitting), and
               the winner's step is no longer than its step (the planner chooses at least as fast)
  --gpus       P, and --tokens the tokens of a step (GBS x s): every ranked row's tokens/s per
               GPU is T / step / P, and its MFU in (0, 1) and equal to tokens/s x the model's FLOPs a
               token (PaLM's count, attention causally halved: 3 (L (2 (h (H + 2 Hkv) d + H d h + h F
               + f h) + 2 s H d) + 2 h V)) over the peak
  --row        NAME is ranked with TOKENS tokens/s per GPU and MFU% (attention causally halved),
               to the decimals written (the README's figures)
Also checks the rows' order: ranked by step time, then bounded, invalid and out of memory, each
with a reason; a bounded row's reason says why it was not dry-run.
"""
import argparse
import json
import sys

ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--published", required=True)
ap.add_argument("--gpus", type=float, required=True)
ap.add_argument("--tokens", type=float, required=True)
ap.add_argument("--row", action="append", default=[])
a = ap.parse_args()
js = json.load(open(a.file))
fails = []
order = {"ranked": 0, "bounded": 1, "invalid": 2, "out_of_memory": 3}
c = js["config"]
d = c["h"] // c["H"]
F = 2 * c["f"] if c["mlp"] == "swiglu" else c["f"]
assert "window" not in c and "docs" not in c, "the MFU check below counts an unmasked causal layer"
layer = 2 * (c["h"] * (c["H"] + 2 * c["Hkv"]) * d + c["H"] * d * c["h"] + c["h"] * F + c["f"] * c["h"]) + 2 * c["s"] * c["H"] * d
flops_per_token = 3 * (js["layers"] * layer + 2 * c["h"] * js["vocab"])
for plan in js["plans"]:
    rows = plan["rows"]
    peak = plan["hardware"]["peak_flops"][js["dtype"]]
    places = [order[r["status"]] for r in rows]
    if places != sorted(places):
        fails.append("rows not ranked, bounded, invalid, out of memory in that order")
    ranked = [r for r in rows if r["status"] == "ranked"]
    steps = [r["step_s"] for r in ranked]
    if steps != sorted(steps):
        fails.append("ranked rows not by step time")
    for r in rows:
        if not r["reason"]:
            fails.append(f"{r['name']}: no reason")
        if r["status"] == "bounded" and not r["reason"].startswith("not dry-run: "):
            fails.append(f"{r['name']}: a bounded row that does not say why it was not dry-run")
    for r in ranked:
        want = a.tokens / r["step_s"] / a.gpus
        if abs(r["tokens_per_s_per_gpu"] / want - 1) > 1e-9:
            fails.append(f"{r['name']}: {r['tokens_per_s_per_gpu']} tokens/s per GPU, not T / step / P = {want}")
        want_mfu = r["tokens_per_s_per_gpu"] * flops_per_token / peak
        if not 0 < r["mfu"] < 1 or abs(r["mfu"] / want_mfu - 1) > 1e-9:
            fails.append(f"{r['name']}: MFU {r['mfu']}, not in (0, 1) or not tokens/s x FLOPs / peak = {want_mfu}")
    published = [r for r in rows if r["name"] == a.published]
    if len(published) != 1 or published[0]["status"] != "ranked":
        fails.append(f"{a.published}: not one ranked row ({[r['status'] for r in published]})")
    elif ranked[0]["step_s"] > published[0]["step_s"]:
        fails.append(f"the winner {ranked[0]['name']} is slower than {a.published}")
    else:
        p = published[0]
        print(f"{plan['hardware']['name']}: winner {ranked[0]['name']}: {ranked[0]['tokens_per_s_per_gpu']:.1f} tokens/s per GPU; "
              f"{a.published} (place {p['place']}): {p['tokens_per_s_per_gpu']:.1f}, MFU {100 * p['mfu']:.1f}%")
def decimals(text):
    return len(text.split(".")[1]) if "." in text else 0


for spec in a.row:
    name, tokens, mfu = spec.rsplit(":", 2)
    rows = [r for r in js["plans"][0]["rows"] if r["name"] == name and r["status"] == "ranked"]
    if not rows:
        fails.append(f"{name}: not ranked")
        continue
    r = rows[0]
    got_tokens = round(r["tokens_per_s_per_gpu"], decimals(tokens))
    got_mfu = round(100 * r["mfu"], decimals(mfu))
    if got_tokens != float(tokens) or got_mfu != float(mfu):
        fails.append(f"{name}: {got_tokens} tokens/s per GPU and MFU {got_mfu}%, the text says {tokens} and {mfu}%")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
