#!/usr/bin/env python3
"""Checks `ringside plan --gbs ... --emit megatron`'s output (read from stdin): for the winner and
the runner-up, the Megatron-LM flags say the degrees their names say (TP, CP and its kind, PP, VP,
the ZeRO stage), the layers a virtual stage, the batch and the sequence; every flag printed is one
of Megatron-LM's (the names tests/test_emit.cpp lists from its parser).

usage: plan ... | emit_facts.py --layers L --gbs GBS --seq S
"""
import argparse
import re
import sys

MEGATRON = {
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--bf16", "--ckpt-format",
    "--context-parallel-size", "--cp-comm-type", "--data-parallel-sharding-strategy", "--fp8-format", "--fp8-recipe",
    "--global-batch-size", "--hierarchical-context-parallel-sizes", "--micro-batch-size", "--num-layers",
    "--num-layers-per-virtual-pipeline-stage", "--overlap-grad-reduce", "--pipeline-model-parallel-size",
    "--recompute-granularity", "--recompute-method", "--recompute-modules", "--recompute-num-layers", "--seq-length",
    "--sequence-parallel", "--tensor-model-parallel-size", "--tp-comm-overlap", "--use-distributed-optimizer",
    "--use-megatron-fsdp", "--use-tp-pp-dp-mapping"}
KINDS = {"ring": "p2p", "all-gather": "all_gather", "ulysses": "a2a"}


def degrees(name):
    """T, C, the CP kind's cp_comm_type, [U, R] for Ulysses x ring, and PP, VP, ZeRO of a step row's name."""
    words = name.split()
    t, c, kinds, sizes = 1, 1, [], []
    for part in words[0].split("x"):
        m = re.fullmatch(r"([a-z-]+?)(\d+)", part)
        kind, n = m.group(1), int(m.group(2))
        if kind in ("tp", "tp-sp"):
            t = n
        else:
            c *= n
            kinds.append(kind)
            sizes.append(n)
    comm = "a2a+p2p" if len(kinds) == 2 else KINDS.get(kinds[0]) if kinds else None
    field = {k: int(re.search(k + r"(\d+)", name).group(1)) if re.search(r"\b" + k + r"\d+", name) else 1
             for k in ("pp", "vp", "zero")}
    return t, c, comm, sizes, field


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--gbs", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    a = ap.parse_args()
    text = sys.stdin.read()
    block = text[text.index("--emit megatron:"):]
    rows = re.findall(r"^    (winner|runner-up) (.+):\n((?:      .*\n)+)", block, re.M)
    assert [r[0] for r in rows][:2] == ["winner", "runner-up"], rows
    for role, name, body in rows[:2]:
        flags = " ".join(l.strip() for l in body.splitlines() if l.strip().startswith("--"))
        printed = set(re.findall(r"(?:^| )(--[a-z0-9-]+)", flags))
        assert printed <= MEGATRON, (role, printed - MEGATRON)
        t, c, comm, sizes, f = degrees(name)
        want = [f"--tensor-model-parallel-size {t}", f"--pipeline-model-parallel-size {f['pp']}",
                f"--global-batch-size {a.gbs}", f"--seq-length {a.seq}", f"--num-layers {a.layers}"]
        if c > 1:
            want += [f"--context-parallel-size {c}", f"--cp-comm-type {comm}"]
        if comm == "a2a+p2p":
            want.append(f"--hierarchical-context-parallel-sizes {sizes[0]} {sizes[1]}")
        if f["vp"] > 1 and a.layers % (f["pp"] * f["vp"]) == 0:
            want.append(f"--num-layers-per-virtual-pipeline-stage {a.layers // (f['pp'] * f['vp'])}")
        if f["zero"] >= 1:
            want.append("--use-distributed-optimizer")
        if f["zero"] >= 2:
            want.append("--data-parallel-sharding-strategy " + ("optim_grads" if f["zero"] == 2 else "optim_grads_params"))
        for w in want:
            assert re.search(re.escape(w) + r"( |$)", flags), (role, name, w, flags)
        if c == 1:
            assert "--context-parallel-size" not in flags, (role, flags)
        print(f"{role} {name}: {len(printed)} flags, each Megatron-LM's, the degrees as named")


if __name__ == "__main__":
    main()
