#!/usr/bin/env python3
"""Issue 59: the context-parallel schemes on the command line, the pass-Q ring (p2p-q, ring-q) among them.

Usage: cp_scheme_cli.py RINGSIDE WORKDIR CASE

  compare     compare --cp-comm p2p-q --ranks 4 (the issue's Done-when): ring-q OK against fp64,
              every rank's bytes sent equal to the formula and to (R-1)(2 q + l) counted from the
              config (q = b n H d, l = b H n, fp32), --json's parallel.cp_comm_type "p2p-q"; its
              load-balance table is the pass-Q ring's (labelled ring-q, the contiguous layout's
              work falling from rank 0: the key owner computes)
  strategies  compare --strategies ring,ring-q with Hkv = H: both OK, ring-q's forward bytes the
              ring's plus exactly the lse's, (R-1) b H n 4, on every rank; the table is the first
              ring's (ring), and with ring-q,ring the pass-Q ring's
  refused     --cp-comm bogus (compare, run, model, plan), --cp-a2a beside p2p-q, Ulysses around a
              pass-Q ring and plan's empty, none and empty-item lists: exit 2, one line naming the
              flag or the name (an unknown scheme's line lists p2p-q)
  model       model --cp-comm p2p-q prints and writes the ring-q layer's modeled time, the same as
              model --strategy ring-q's and not the K/V ring's
  plan        plan --cp-comm p2p-q,p2p weighs both (rows of p2p and p2p-q only, ring-q among them);
              plan without --cp-comm weighs no p2p-q row; --cp-comm all weighs every scheme;
              plan --gbs --cp-comm p2p-q ranks ring-q rows
  trace       compare --cp-comm p2p-q --trace: every ring-q process (measured and its modeled twin)
              carries tile_map "ring_steps" in otherData.processes; trace-stats reads it, refuses a
              copy whose tile_map is "bogus" naming the field, and reads a copy without tile_map
  run         run --strategy ring-q, tp2xring-q2 (ranks 4) head each rank's step table "query block
              of", and each row's rank owns the queries computed (the pass-Q ring: query tokens of
              the block's owner, contiguous layout); ring and ulysses2xring2 keep "K/V block of"

Exit 0 when all hold; 1 naming the first that does not.
"""
import json
import os
import re
import shutil
import subprocess
import sys

# A layer compare runs in a second; BIG, one the model's commands dry-run as fast.
LAYER = ["--seq", "256", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128"]
LAYER_MHA = ["--seq", "256", "--hidden", "64", "--heads", "4", "--kv-heads", "4", "--ffn", "128"]
BIG = ["--seq", "8192", "--hidden", "1024", "--heads", "8", "--kv-heads", "4", "--ffn", "4096"]
F32 = 4  # compare runs in fp32


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def run(ringside, *args, rc=0):
    p = subprocess.run([ringside, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != rc:
        raise Failed(f"ringside {' '.join(args)}: exit {p.returncode}, expected {rc}\n{p.stdout[-2000:]}{p.stderr.strip()}")
    return p.stdout, p.stderr


def load(path):
    with open(path) as f:
        return json.load(f)


def strategy(js, name):
    found = [s for s in js["strategies"] if s["name"] == name]
    check(len(found) == 1, f"--json: one strategy named {name}, got {[s['name'] for s in js['strategies']]}")
    return found[0]


def row_ok(out, name, P):
    """compare's table has the row of `name` on P ranks, verdict OK, sent equal to its formula."""
    m = re.search(rf"^  {re.escape(name)} +{P} .* ([0-9.]+ [KMG]?i?B) \(([0-9.]+ [KMG]?i?B)\) +[0-9.]+ m?s +OK$", out, re.M)
    check(m is not None, f"compare prints no OK row for {name} on {P} ranks:\n{out[:3000]}")
    check(m.group(1) == m.group(2), f"{name}: sent/rank {m.group(1)}, its formula {m.group(2)}")


def lse_free_bytes(cfg, P):
    """The pass-Q ring's forward bytes per rank over P ranks (T 1): (R-1)(2 q + l), fp32; and the lse's part."""
    b, s, H, h = cfg["b"], cfg["s"], cfg["H"], cfg["h"]
    d = h // H
    S = -(-s // (2 * P)) * (2 * P)  # zigzag pads to a multiple of 2R
    n = S // P
    q, l = b * n * H * d * F32, b * H * n * F32
    return (P - 1) * (2 * q + l), (P - 1) * l


def check_formulas(st):
    check(st["ok"] and st["checks"]["bytes_sent"] and st["checks"]["accurate"], f"{st['name']}: not OK: {st['checks']}")
    for r in st["per_rank"]:
        check(r["bytes_sent"] == r["formula_bytes_sent"], f"{st['name']} rank {r['rank']}: sent {r['bytes_sent']}, formula {r['formula_bytes_sent']}")
        check(r["attention_flops"] == r["formula_attention_flops"], f"{st['name']} rank {r['rank']}: attention FLOPs off their formula")


def case_compare(ringside, work):
    j = os.path.join(work, "compare.json")
    out, _ = run(ringside, "compare", "--cp-comm", "p2p-q", "--ranks", "4", "--json", j)
    print(out)
    row_ok(out, "ring-q", 4)
    js = load(j)
    check([s["name"] for s in js["strategies"]] == ["ring-q"], f"strategies {[s['name'] for s in js['strategies']]}")
    st = strategy(js, "ring-q")
    par = st["parallel"]
    check(par["cp_comm_type"] == "p2p-q" and par["cp_size"] == 4 and par["ring_size"] == 4 and par["tp_size"] == 1,
          f"parallel: {par}")
    check_formulas(st)
    forward, _ = lse_free_bytes(js["config"], 4)
    for r in st["per_rank"]:
        check(r["bytes_sent"]["forward"] == forward, f"rank {r['rank']}: forward {r['bytes_sent']['forward']}, (R-1)(2q+l) = {forward}")
    # The table is the pass-Q ring's: under a causal mask and contiguous shards its rank 0 holds
    # the keys every later query sees, so its work falls from rank 0 (the K/V ring's rises).
    check("\n  ring-q attention work per rank (forward" in out, "no load-balance table labelled ring-q")
    work = js["ring_work_per_rank"]["contiguous"]["gflops"]
    check(all(a > b for a, b in zip(work, work[1:])), f"contiguous work per rank {work}: not falling from rank 0")


def case_strategies(ringside, work):
    j = os.path.join(work, "strategies.json")
    out, _ = run(ringside, "compare", "--strategies", "ring,ring-q", "--ranks", "4", *LAYER_MHA, "--json", j)
    print(out)
    row_ok(out, "ring", 4)
    row_ok(out, "ring-q", 4)
    js = load(j)
    ring, ring_q = strategy(js, "ring"), strategy(js, "ring-q")
    check(ring["parallel"]["cp_comm_type"] == "p2p" and ring_q["parallel"]["cp_comm_type"] == "p2p-q",
          f"cp_comm_type {ring['parallel']['cp_comm_type']}, {ring_q['parallel']['cp_comm_type']}")
    check_formulas(ring)
    check_formulas(ring_q)
    _, lse = lse_free_bytes(js["config"], 4)
    for a, b in zip(ring["per_rank"], ring_q["per_rank"]):
        diff = b["bytes_sent"]["forward"] - a["bytes_sent"]["forward"]
        check(diff == lse, f"rank {a['rank']}: ring-q sends {diff} bytes forward more than the ring; the lse is {lse}")
    check("\n  ring attention work per rank" in out, "no load-balance table for the first ring, ring")
    out, _ = run(ringside, "compare", "--strategies", "ring-q,ring", "--ranks", "4", *LAYER_MHA)
    check("\n  ring-q attention work per rank" in out, "with ring-q first, the table is not the pass-Q ring's")


def refused(ringside, pattern, *args):
    p = subprocess.run([ringside, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = (p.stdout + p.stderr).strip()
    print(f"ringside {' '.join(args)}: exit {p.returncode}: {said.splitlines()[0] if said else ''}")
    check(p.returncode == 2, f"ringside {' '.join(args)}: exit {p.returncode}, expected 2\n{said}")
    check(re.search(pattern, said), f"ringside {' '.join(args)}: /{pattern}/ not in\n{said}")


def case_refused(ringside, work):
    listed = r"p2p, all_gather, a2a, a2a\+p2p or p2p-q|\{p2p,all_gather,all-gather,a2a,a2a\+p2p,p2p-q\}"
    refused(ringside, rf"--cp-comm.*bogus.*({listed})", "compare", "--cp-comm", "bogus", "--ranks", "4")
    refused(ringside, rf"--cp-comm.*bogus.*({listed})", "run", "--cp-comm", "bogus", "--ranks", "4")
    refused(ringside, rf"--cp-comm.*bogus.*({listed})", "model", "--cp-comm", "bogus", "--ranks", "4")
    refused(ringside, rf"unknown --cp-comm 'bogus' \(({listed}), or all\)", "plan", "--gpus", "4", "--cp-comm", "bogus")
    refused(ringside, rf"unknown --cp-comm 'bogus'", "plan", "--gpus", "4", "--gbs", "8", "--cp-comm", "p2p,bogus")
    refused(ringside, r"--cp-a2a 2 is the all-to-all degree of --cp-comm a2a\+p2p, but --cp-comm is p2p-q",
            "compare", "--cp-comm", "p2p-q", "--cp-a2a", "2", "--ranks", "4")
    refused(ringside, r"--cp-a2a 2 .* but --cp-comm is p2p-q", "model", "--cp-comm", "p2p-q", "--cp-a2a", "2", "--ranks", "4")
    refused(ringside, r"strategy 'ulysses2xring-q2': groups out of order.*names: tp, tp-sp, ring, all-gather, ulysses, ring-q,",
            "compare", "--strategies", "ulysses2xring-q2", "--ranks", "4")
    refused(ringside, r"--cp-comm: needs a value", "plan", "--gpus", "4", "--cp-comm", "")
    refused(ringside, r"--cp-comm 'p2p,,a2a': an empty item", "plan", "--gpus", "4", "--cp-comm", "p2p,,a2a")
    refused(ringside, r"--cp-comm 'p2p,': an empty item", "plan", "--gpus", "4", "--cp-comm", "p2p,")
    refused(ringside, r"--cp-comm none: plan weighs TP alone", "plan", "--gpus", "4", "--cp-comm", "none")


def modeled_total(ringside, work, name, *how):
    j = os.path.join(work, f"model-{name}.json")
    out, _ = run(ringside, "model", *how, "--ranks", "4", *BIG, "--json", j)
    print(out)
    js = load(j)
    check(js["strategy"] == name, f"model {' '.join(how)}: strategy {js['strategy']}, expected {name}")
    check(re.search(rf"^  {re.escape(name)} \(modeled\)$", out, re.M), f"model {' '.join(how)}: no '{name} (modeled)' table")
    check(re.search(r"^  layer +forward .* both: [0-9.]+ m?s on the slowest rank$", out, re.M), "model: no modeled layer time")
    total = js["layer"]["total_s"]
    check(total > 0, f"model {' '.join(how)}: layer time {total}")
    return total


def case_model(ringside, work):
    by_flag = modeled_total(ringside, work, "ring-q", "--cp-comm", "p2p-q")
    by_name = modeled_total(ringside, work, "ring-q", "--strategy", "ring-q")
    kv = modeled_total(ringside, work, "ring", "--cp-comm", "p2p")
    check(by_flag == by_name, f"model --cp-comm p2p-q {by_flag} s, --strategy ring-q {by_name} s")
    check(by_flag != kv, f"model --cp-comm p2p-q models the K/V ring's {kv} s")


def plan_rows(ringside, work, tag, *args):
    j = os.path.join(work, f"plan-{tag}.json")
    run(ringside, "plan", "--gpus", "4", *BIG, *args, "--json", j)
    return load(j)["plans"][0]["rows"]


def case_plan(ringside, work):
    rows = plan_rows(ringside, work, "named", "--cp-comm", "p2p-q,p2p")
    schemes = {r["cp_comm"] for r in rows if r["cp"] > 1}
    check(schemes == {"p2p", "p2p-q"}, f"plan --cp-comm p2p-q,p2p weighed {sorted(schemes)}")
    ranked = [r for r in rows if r["status"] == "ranked"]
    check(any(r["configuration"] == "ring-q" for r in ranked), f"no ranked ring-q row: {[r['name'] for r in ranked][:12]}")
    check(any(r["configuration"] == "ring" for r in ranked), "no ranked ring row")
    check(all("--cp-comm p2p-q" in r["model_flags"] for r in rows if r["cp_comm"] == "p2p-q"),
          "a p2p-q row's model flags do not name p2p-q")
    rows = plan_rows(ringside, work, "default")
    check(not any(r["cp_comm"] == "p2p-q" or "ring-q" in r["name"] for r in rows), "plan weighs p2p-q unasked")
    schemes = {r["cp_comm"] for r in rows if r["cp"] > 1}
    check(schemes == {"p2p", "all_gather", "a2a", "a2a+p2p"}, f"plan weighs {sorted(schemes)} by default")
    rows = plan_rows(ringside, work, "all", "--cp-comm", "all")
    schemes = {r["cp_comm"] for r in rows if r["cp"] > 1}
    check(schemes == {"p2p", "all_gather", "a2a", "a2a+p2p", "p2p-q"}, f"plan --cp-comm all weighs {sorted(schemes)}")
    rows = plan_rows(ringside, work, "step", "--gbs", "8", "--cp-comm", "p2p-q")
    check({r["cp_comm"] for r in rows if r["cp"] > 1} == {"p2p-q"}, "plan --gbs --cp-comm p2p-q weighs other schemes")
    check(any(r["status"] == "ranked" and r["name"].startswith("ring-q") for r in rows), "plan --gbs ranks no ring-q row")


def case_trace(ringside, work):
    t = os.path.join(work, "ring-q.trace.json")
    run(ringside, "compare", "--cp-comm", "p2p-q", "--ranks", "4", *LAYER, "--trace", t)
    js = load(t)
    processes = js["otherData"]["processes"]
    ring_q = [p for p in processes if p["strategy"].startswith("ring-q")]
    check(len(ring_q) == 8, f"{len(ring_q)} ring-q processes, expected 4 measured and 4 modeled")
    check(all(p.get("tile_map") == "ring_steps" for p in ring_q), f"tile_map of the ring-q processes: {[p.get('tile_map') for p in ring_q]}")
    out, _ = run(ringside, "trace-stats", t)
    check(re.search(r"^  ring-q +0 ", out, re.M), f"trace-stats prints no ring-q rank:\n{out[:2000]}")
    bad = os.path.join(work, "bogus.trace.json")
    js["otherData"]["processes"][1]["tile_map"] = "bogus"
    with open(bad, "w") as f:
        json.dump(js, f)
    p = subprocess.run([ringside, "trace-stats", bad], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = (p.stdout + p.stderr).strip()
    print(f"trace-stats {bad}: exit {p.returncode}: {said}")
    check(p.returncode != 0 and re.search(r"otherData\.processes\[1\].*tile_map must be \"ring_steps\" or \"every_rank\", got \"bogus\"", said),
          f"trace-stats read a tile_map 'bogus': exit {p.returncode}\n{said}")
    old = os.path.join(work, "old.trace.json")
    for proc in js["otherData"]["processes"]:
        proc.pop("tile_map", None)
    with open(old, "w") as f:
        json.dump(js, f)
    out, _ = run(ringside, "trace-stats", old)
    check(re.search(r"^  ring-q +0 ", out, re.M), "trace-stats does not read a trace without tile_map")


def step_tables(out):
    """`run`'s step tables: {rank: (header's block words, [(block_of, computed), ...])}."""
    tables = {}
    for m in re.finditer(r"^  rank (\d+), ring steps .*\n  phase +step +(.+?) of +GFLOP.*\n((?:  (?:forward|backward) .*\n)+)", out, re.M):
        rows = [(int(r.group(1)), r.group(2)) for r in
                re.finditer(r"^  (?:forward|backward) +\d+ +rank (\d+) .*  (q\[.*|none.*)$", m.group(3), re.M)]
        tables[int(m.group(1))] = (m.group(2), rows)
    return tables


def case_run(ringside, work):
    # The pass-Q ring, alone and under TP 2, contiguous: rank r of a ring of R holds tokens
    # [r S/R, (r+1) S/R) of its ring; every query range a row computed lies in its block's owner's.
    s = 256
    # World rank w is ring rank w // T (TP innermost).
    for name, T in (("ring-q", 1), ("tp2xring-q2", 2)):
        R = 4 // T
        out, _ = run(ringside, "run", "--strategy", name, "--ranks", "4", "--layout", "contiguous", *LAYER)
        tables = step_tables(out)
        check(sorted(tables) == [0, 1, 2, 3], f"run {name}: step tables of ranks {sorted(tables)}")
        for r, (block, rows) in tables.items():
            check(block == "query block", f"run {name}, rank {r}: the step table heads '{block} of', not 'query block of'")
            check(len(rows) == 2 * R, f"run {name}, rank {r}: {len(rows)} step rows")
            for owner, computed in rows:
                check(owner % T == r % T, f"run {name}, rank {r}: a block of rank {owner}, outside its ring")
                n = s // R
                lo = owner // T * n
                for q0, q1 in re.findall(r"q\[(\d+):(\d+)\]", computed):
                    check(lo <= int(q0) and int(q1) <= lo + n,
                          f"run {name}, rank {r}: row of rank {owner}'s queries computed q[{q0}:{q1}], outside [{lo}, {lo + n})")
    for name in ("ring", "ulysses2xring2"):
        out, _ = run(ringside, "run", "--strategy", name, "--ranks", "4", *LAYER)
        tables = step_tables(out)
        check(len(tables) == 4 and all(b == "K/V block" for b, _ in tables.values()),
              f"run {name}: step tables headed {[b for b, _ in tables.values()]}, expected 'K/V block of' on 4 ranks")


CASES = {"run": case_run, "compare": case_compare, "strategies": case_strategies, "refused": case_refused, "model": case_model,
         "plan": case_plan, "trace": case_trace}


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in CASES:
        print(__doc__)
        return 2
    ringside, work, case = sys.argv[1], os.path.join(sys.argv[2], sys.argv[3]), sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        CASES[case](ringside, work)
    except Failed as e:
        print(f"cp_scheme_cli {case}: FAILED: {e}")
        return 1
    print(f"cp_scheme_cli {case}: as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
