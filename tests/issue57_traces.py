#!/usr/bin/env python3
"""Issue 57: a trace is checked for what the readers rely on, and a file is gzip by its bytes.

usage: issue57_traces.py RINGSIDE KINETO_RING4 WORKDIR

1. Genuine traces are read: `compare --trace` (recorded groups and their modeled twins) through
   `model --from` and `trace-stats`; `model --trace` of every strategy, in FP8 with Megatron's TP
   overlap, with overlapped gradient buckets and a whole step; `model --compare` of the Kineto
   fixture.
2. Corrupt copies are refused, exit 1 as any corrupt trace (not JSON, truncated), with one error
   naming the event and the field: program order all 0 (the break test's) and against time;
   otherData.modeled_groups of the wrong type (the break test's) and other otherData fields; a
   peer outside the strategy, or the event's own; and in the Kineto fixture a send's peer 99, -1,
   abc and itself (the break test's), a receive's own rank.
3. gzip by magic bytes, not by name: plain JSON named .json.gz (refused before as needing GiB),
   gzip named .json, a Kineto folder of each.

Prints one line per try and exits 1 if any failed.
"""
import copy
import gzip
import json
import os
import re
import resource
import shutil
import subprocess
import sys

RS, RING4, WORK = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
os.chdir(WORK)
SMALL = ["--seq", "64", "--hidden", "32", "--heads", "4", "--kv-heads", "4", "--ffn", "64"]
# The Kineto fixture's own configuration (tests/CMakeLists.txt, RING4_ARGS).
RING4_ARGS = ["--strategy", "ring", "--ranks", "4", "--seq", "256", "--hidden", "64", "--heads", "4", "--kv-heads", "4",
              "--no-causal", "--no-rope", "--dropout", "0", "--layout", "contiguous", "--dtype", "fp32", "--only", "attention",
              "--hw", "a100-nvlink"]
fails = 0
tried = 0


def expect(what, args, rc, pattern=None, address_space=None):
    """Runs ringside with `args` (under ulimit -v `address_space` bytes if given); passes when it
    exits `rc` and its output matches `pattern`."""
    global fails, tried
    tried += 1
    limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))) if address_space else None
    p = subprocess.run([RS] + args, capture_output=True, text=True, preexec_fn=limit)
    out = p.stdout + p.stderr
    ok = p.returncode == rc and (pattern is None or re.search(pattern, out))
    print(("ok:   " if ok else "FAIL: ") + what + f" -> exit {p.returncode}")
    if not ok:
        print(f"    want exit {rc} and /{pattern}/; got:\n    " + out[-800:].replace("\n", "\n    "))
        fails += 1
    return out


def write_json(path, doc, gz=False):
    data = json.dumps(doc).encode()
    with open(path, "wb") as f:
        f.write(gzip.compress(data) if gz else data)


# ---- 1. Genuine traces are read.
expect("compare --trace (recorded groups and their twins)", ["compare", "--ranks", "4"] + SMALL + ["--trace", "t.json"], 0)
expect("model --from the compare trace", ["model", "--from", "t.json"], 0, r"modeled")
expect("trace-stats of the compare trace", ["trace-stats", "t.json"], 0, r"ring")
for strategy in ["tp-sp", "ring", "ulysses", "all-gather", "tp2xring2", "ulysses2xring2"]:
    expect(f"model --trace of {strategy}, read back", ["model", "--strategy", strategy, "--ranks", "4"] + SMALL +
           ["--trace", f"m-{strategy}.json"], 0)
    expect(f"trace-stats of the modeled {strategy}", ["trace-stats", f"m-{strategy}.json"], 0)
for name, extra in [("fp8 with Megatron's TP overlap", ["--tp", "2", "--cp", "2", "--dtype", "fp8", "--stack", "megatron", "--tp-comm-overlap"]),
                    ("overlapped gradient buckets", ["--strategy", "ring", "--overlap-grad-reduce"]),
                    ("selective recompute on Megatron's stack", ["--strategy", "tp-sp", "--recompute", "selective", "--stack", "megatron"]),
                    ("a whole step", ["--strategy", "ring", "--gbs", "8", "--pp", "2", "--layers", "4"])]:
    expect(f"model --trace, {name}, read back", ["model", "--ranks", "4"] + SMALL + extra + ["--trace", "x.json"], 0)
    expect(f"trace-stats of it ({name})", ["trace-stats", "x.json"], 0)
expect("model --compare of the Kineto fixture", ["model", "--compare", RING4] + RING4_ARGS, 0, r"measured")

# ---- 2. Corrupt copies are refused, naming the event and the field.
good = json.load(open("t.json"))
twins = list(good["otherData"].get("modeled_groups", {}))
assert twins, "compare --trace writes modeled twins"
events = good["traceEvents"]
ring1 = next(e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name" and e["args"]["name"] == "ring: GPU 1")


def corrupt(what, edit, pattern, commands=(["model", "--from"], ["trace-stats"])):
    doc = copy.deepcopy(good)
    edit(doc)
    write_json("bad.json", doc)
    for command in commands:
        expect(f"{what}: {command[0]}", command + ["bad.json"], 1, pattern)


def all_orders_zero(doc):
    for e in doc["traceEvents"]:
        if "order" in e.get("args", {}):
            e["args"]["order"] = e["args"]["end_order"] = 0


corrupt("every event's program order 0 (the break test's)", all_orders_zero,
        r"bad\.json: traceEvents\[\d+\]: 'args\.(end_)?order' = 0 is also 'args\.(end_)?order' of traceEvents\[\d+\]")


def compute_ops(doc, pid):
    return [i for i, e in enumerate(doc["traceEvents"])
            if e.get("ph") == "X" and e.get("pid") == pid and e.get("cat") in ("gemm", "attention", "norm", "elementwise")
            and "order" in e.get("args", {})]


def swap_two_ops(doc):
    first, second = compute_ops(doc, ring1)[:2]
    a, b = doc["traceEvents"][first]["args"], doc["traceEvents"][second]["args"]
    a["order"], b["order"] = b["order"], a["order"]
    a["end_order"], b["end_order"] = b["end_order"], a["end_order"]


corrupt("two ops' program order swapped against their times", swap_two_ops,
        r"bad\.json: traceEvents\[\d+\]: 'args\.(end_)?order' = \d+ puts its .* program order against time")


def reverse_orders(doc):
    for i in compute_ops(doc, ring1 + 1):
        a = doc["traceEvents"][i]["args"]
        a["order"], a["end_order"] = 10**9 - a["end_order"], 10**9 - a["order"]


corrupt("a rank's ops' program order reversed", reverse_orders, r"traceEvents\[\d+\]: .*program order against time")
for value, shown in [("twins", r'got "twins"'), (5, "got 5"), ([twins[0]], "got array")]:
    corrupt(f"otherData.modeled_groups = {json.dumps(value)} (the break test's)",
            lambda d, v=value: d["otherData"].__setitem__("modeled_groups", v),
            r"bad\.json: otherData\.modeled_groups must be an object \(modeled group label: \{of, hardware, dtype, \.\.\.\}\), " + shown)
corrupt("a modeled group that is not an object", lambda d: d["otherData"]["modeled_groups"].__setitem__(twins[0], "ring"),
        re.escape(f'otherData.modeled_groups["{twins[0]}"] must be an object'))
corrupt("a modeled group's layers a string", lambda d: d["otherData"]["modeled_groups"][twins[0]].__setitem__("layers", "4"),
        re.escape(f'otherData.modeled_groups["{twins[0]}"].layers must be an integer from 1 to 2^31 - 1, got "4"'))
corrupt("otherData.modeled a string", lambda d: d["otherData"].__setitem__("modeled", "false"),
        r'otherData\.modeled must be a boolean, got "false"')
corrupt("otherData.ranks a string", lambda d: d["otherData"].__setitem__("ranks", "4"),
        r'otherData\.ranks must be an integer from 1 to 2\^31 - 1, got "4"')
corrupt("otherData.config.causal a string", lambda d: d["otherData"]["config"].__setitem__("causal", "no"),
        r'otherData\.config\.causal must be a boolean, got "no"')
corrupt("otherData.modeled_hardware a number", lambda d: d["otherData"].__setitem__("modeled_hardware", 100),
        r"otherData\.modeled_hardware must be a hardware profile")
send = next(i for i, e in enumerate(events)
            if e.get("cat") == "p2p" and e.get("args", {}).get("direction") == "send" and e.get("pid") == ring1)
for peer, pattern in [(99, r"'args\.peer' = 99 is not a rank of ring \(its ranks: 0 to 3\)"),
                      (1, r"'args\.peer' = 1 is the event's own rank \(ring rank 1\)")]:
    corrupt(f"a ring send's peer {peer}", lambda d, p=peer: d["traceEvents"][send]["args"].__setitem__("peer", p),
            rf"bad\.json: traceEvents\[{send}\]: " + pattern)
corrupt("an op of a pid otherData.processes does not list (the second break test's)",
        lambda d: d["traceEvents"][compute_ops(d, ring1)[0]].__setitem__("pid", 99),
        r"bad\.json: traceEvents\[\d+\]: pid 99 is not a process otherData\.processes lists")

# The Kineto fixture, unzipped into a folder of its own per corruption.
ring4 = [json.load(gzip.open(os.path.join(RING4, f"rank{r}.pt.trace.json.gz"))) for r in range(4)]
assert ring4[0]["traceEvents"][24]["name"] == "c10d::send" and ring4[2]["traceEvents"][28]["name"] == "c10d::recv_"


def kineto(what, rank, index, value, pattern):
    docs = copy.deepcopy(ring4)
    docs[rank]["traceEvents"][index]["args"]["Concrete Inputs"][2] = value
    folder = f"k-{len(os.listdir('.'))}"
    os.makedirs(folder)
    for r, d in enumerate(docs):
        write_json(os.path.join(folder, f"rank{r}.pt.trace.json"), d)
    expect(f"Kineto: {what}: trace-stats", ["trace-stats", folder], 1, pattern)
    expect(f"Kineto: {what}: model --compare", ["model", "--compare", folder] + RING4_ARGS, 1, pattern)


for peer, pattern in [("99", r"= 99 is not a rank of the world \(distributedInfo\.world_size = 4\)"),
                      ("-1", r'= "-1" is not a rank'), ("abc", r'= "abc" is not a rank'),
                      ("0", r"= 0 is this file's own rank: a send's peer is another rank")]:
    kineto(f"rank 0's send to peer {peer} (the break test's)", 0, 24, peer,
           r"rank0\.pt\.trace\.json: traceEvents\[24\]: 'args\.Concrete Inputs'\[2\] " + pattern)
kineto("rank 2's receive from itself", 2, 28, "2",
       r"rank2\.pt\.trace\.json: traceEvents\[28\]: 'args\.Concrete Inputs'\[2\] = 2 is this file's own rank: a recv's peer")

# ---- 3. gzip by its magic bytes, not its name.
# The break test's: its last 4 bytes ("    ") read as gzip's size, 514 MiB, made it "need" 7 GiB
# (14 bytes of memory a byte of JSON); under a 3 GiB address space that was a refusal.
with open("t.json", "rb") as f, open("plain.json.gz", "wb") as g:
    g.write(f.read() + b"    ")
expect("plain JSON named .json.gz, under ulimit -v 3 GiB: trace-stats", ["trace-stats", "plain.json.gz"], 0, r"ring",
       address_space=3 << 30)
expect("plain JSON named .json.gz: model --from", ["model", "--from", "plain.json.gz"], 0)
with open("t.json", "rb") as f, open("zipped.json", "wb") as g:
    g.write(gzip.compress(f.read()))
expect("gzip named .json: trace-stats", ["trace-stats", "zipped.json"], 0, r"ring")
os.makedirs("k-plain-gz")
os.makedirs("k-gz-plain")
for r in range(4):
    write_json(os.path.join("k-plain-gz", f"rank{r}.pt.trace.json.gz"), ring4[r])
    shutil.copy(os.path.join(RING4, f"rank{r}.pt.trace.json.gz"), os.path.join("k-gz-plain", f"rank{r}.pt.trace.json"))
for folder in ["k-plain-gz", "k-gz-plain"]:
    expect(f"Kineto folder {folder}: trace-stats", ["trace-stats", folder], 0, r"80 sends paired with their receives")

print(f"{tried} tried, {fails} failed")
sys.exit(1 if fails else 0)
