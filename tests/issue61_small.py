#!/usr/bin/env python3
"""Issue 61, the smaller items, through the CLI: `model` prints the bytes a rank sends by class
(and --json holds them), equal to the closed forms computed here; `model --gbs` and `plan --gbs`
explain the bubble against (PP-1)/(m VP), its parts adding up; the plan's MFU footnote says
nothing of 100% that its rows do not bear out.

usage: issue61_small.py RINGSIDE WORKDIR
"""
import json
import re
import subprocess
import sys

MiB = 1 << 20


def run(ringside, *args):
    p = subprocess.run([ringside, *args], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def classes(path):
    return {c["class"]: c for c in json.load(open(path))["bytes_sent"]}


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)
    print("ok:", what)


def sent_line(out, name):
    m = re.search(r"^ +" + re.escape(name) + r" +(.+)$", out, re.M)
    check(m is not None, f"a sent line for {name}")
    return m.group(1).split("  ")


def bubble_parts_add_up(text):
    """'bubble X%: the formula ... = Y%, and Z% more: a% from ..., b% from ...': X = Y +- Z, Z = sum."""
    m = re.search(r"bubble (-?[\d.]+)%: the formula \(PP-1\)/\(m VP\) = (\d+)/\((\d+) x (\d+)\) = ([\d.]+)%(.*)", text)
    check(m is not None, "a bubble line: " + text[:120])
    bubble, pp1, mb, vp, formula, rest = float(m[1]), int(m[2]), int(m[3]), int(m[4]), float(m[5]), m[6]
    check(abs(formula - 100 * pp1 / (mb * vp)) < 0.051, f"its formula {formula}% is {pp1}/({mb} x {vp})")
    more = re.match(r", and ([\d.]+)% (more|less): (.*)", rest)
    if not more:
        check(abs(bubble - formula) < 0.051, "no parts: the bubble is the formula's")
        return bubble, formula, []
    excess = float(more[1]) * (1 if more[2] == "more" else -1)
    parts = [float(x) for x in re.findall(r"(-?[\d.]+)% from", more[3])]
    check(abs(bubble - formula - excess) < 0.051, f"{bubble}% = {formula}% + {excess}%")
    check(abs(sum(parts) - excess) < 0.051 * len(parts) + 0.001, f"the parts {parts} add up to {excess}%")
    return bubble, formula, parts


def main():
    ringside, work = sys.argv[1], sys.argv[2]
    layer = ["--seq", "8192", "--hidden", "512", "--heads", "8", "--kv-heads", "4", "--ffn", "1024", "--hw", "h100-nvlink"]
    s, h, Hkv, d, bf16 = 8192, 512, 4, 64, 2

    # The contiguous ring on C = 4, non-causal: K/V 2 (C-1) (s/C) Hkv d bytes forward a rank,
    # 2 (2C-1) (s/C) Hkv d backward (dK/dV home too).
    C = 4
    out = run(ringside, "model", "--strategy", "ring", "--ranks", "4", "--no-causal", "--layout", "contiguous", *layer,
              "--json", f"{work}/i61-ring.json")
    print(out[out.find("  sent"):out.find("  memory")])
    fwd, bwd = 2 * (C - 1) * (s // C) * Hkv * d * bf16, 2 * (2 * C - 1) * (s // C) * Hkv * d * bf16
    ring = classes(f"{work}/i61-ring.json")["CP ring (p2p)"]
    check(ring["forward_most_bytes"] == fwd and ring["backward_most_bytes"] == bwd, f"ring K/V {fwd} + {bwd} bytes a rank (--json)")
    check(ring["all_ranks_bytes"] == C * (fwd + bwd), "all ranks: C times one's")
    cells = [c.strip() for c in sent_line(out, "CP ring (p2p)") if c.strip()]
    check(cells[:4] == [f"{fwd / MiB:.2f} MiB", f"{bwd / MiB:.2f} MiB", f"{(fwd + bwd) / MiB:.2f} MiB", f"{C * (fwd + bwd) / MiB:.2f} MiB"],
          f"the printed ring line {cells}")
    check("the dry run counted the same, rank by rank" in out, "the dry run's bytes equal the formulas'")

    # TP 2 x ring 2: TP's all-gathers of (T-1)/T N h, N = s/C, twice forward and four times backward.
    T, C = 2, 2
    out = run(ringside, "model", "--tp", "2", "--cp", "2", "--ranks", "4", *layer, "--json", f"{work}/i61-tpcp.json")
    ag = (T - 1) * (s // C) // T * h * bf16
    k = classes(f"{work}/i61-tpcp.json")
    check(k["TP all-gather"]["forward_most_bytes"] == 2 * ag and k["TP all-gather"]["backward_most_bytes"] == 4 * ag,
          f"TP all-gather 2 x {ag} forward, 4 x backward")
    check(k["TP reduce-scatter"]["forward_most_bytes"] == 2 * ag, "TP reduce-scatter 2 x (T-1)/T N h forward")
    each = [c["most_bytes"] for n, c in k.items() if n != "all classes"]
    check(max(each) <= k["all classes"]["most_bytes"] <= sum(each), "all classes: at least the largest class, at most their sum")

    # The step: PP 4, VP 2, m = 16: a middle stage sends 2 VP m activations or their gradients
    # of (s/C) h / T bf16 each; the bubble's parts add up to it.
    out = run(ringside, "model", "--tp", "2", "--cp", "2", "--ranks", "4", *layer, "--gbs", "16", "--pp", "4", "--vp", "2",
              "--layers", "16", "--vocab", "32000", "--json", f"{work}/i61-step.json")
    print(out[out.find("  the step"):])
    step = json.load(open(f"{work}/i61-step.json"))["step"]
    pp = {c["class"]: c for c in step["bytes_sent"]}["PP send/recv"]["most_bytes"]
    check(pp == 2 * 2 * 16 * (s // 2) * (h // 2) * bf16, f"PP send/recv {pp} = 2 VP m (s/C) (h/T) 2")
    b = step["bubble_parts"]
    check(abs(b["formula"] - 3 / 32) < 1e-12, "the formula (PP-1)/(m VP) = 3/32")
    check(abs(b["formula"] + b["uneven_layers"] + b["ends"] + b["transfers"] - b["bubble"]) < 1e-9, "the parts add up (--json)")
    check(abs(b["bubble"] - step["bubble_fraction"]) < 1e-9, "the bubble is the step's")
    line = next(l for l in out.splitlines() if l.strip().startswith("bubble "))
    bubble_parts_add_up(line)
    check("from the transfers between stages" in line and "LM head" in line, "the line names the head and the transfers")

    # plan --gbs: the footnote's whole count true of its rows, and the bubbles explained.
    out = run(ringside, "plan", "--preset", "llama3-8b", "--seq", "32768", "--gpus", "64", "--hw", "h100-nvlink", "--gbs", "64",
              "--pp", "4", "--top", "5")
    mfus = [float(x) for x in re.findall(r"^ +\d+  \S.*? +\d+ +([\d.]+)% ", out, re.M)]
    check(len(mfus) == 5, f"five rows' MFU {mfus}")
    m = re.search(r"counted whole \(PaLM's and Megatron's convention: ([\d.]+)x these FLOPs\), the best would read ([\d.]+)%; "
                  r"no row passes 100% either way", out)
    check(m is not None, "the whole count's line")
    check(abs(float(m[2]) - float(m[1]) * max(mfus)) < 0.2 and float(m[2]) < 100, "its best is the best row's MFU times the ratio, under 100%")
    check("over 100%" not in out, "no line says a row passes 100%")
    lines = re.findall(r"^  (#\d+)'s (bubble .*?)(?=^  \S)", out, re.M | re.S)
    check(len(lines) >= 1, "a bubble explained")
    for who, text in lines:
        bubble_parts_add_up(" ".join(text.split()))
    print("all checks passed")


main()
