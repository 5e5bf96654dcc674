#!/usr/bin/env python3
"""Issue 57: every flag a command accepts changes what it computes or prints, or is refused.

Usage: flag_sweep.py RINGSIDE WORKDIR [--only COMMAND] [--verbose]

The commands and their flags come from the program itself: `ringside --help` lists the
subcommands (and `ringside bench --help` bench's), and each command's --help its options and
positionals. Every one of them must have an entry in SWEEP below, so a flag added to the CLI
fails this test until someone says what it should change; an entry naming a flag the command no
longer has fails too.

Each entry is one of (or a list of them, each checked):
  Values(a, b)  the command with FLAG a and with FLAG b (a None: without the flag) must differ,
                in stdout or in a file it writes (--json, --trace, a --dump's tensors), once two
                things are masked in both: what varies between identical runs (the first line
                runs three times for a command that measures, twice otherwise; a number that
                differs between them is masked in that line, with every time, rate or share
                beside it, and a command's `measures` regex masks what a position cannot catch:
                a benchmark's "ok" or "BELOW TARGET"), and each value's own echo ("h100-ib" and
                "h200" both read <V>; a number, any number equal to it): a flag whose only effect
                is to print its value is caught ("Times are modeled on h100-ib" above the
                default's numbers; "recompute=full" above none's saved bytes).
  On()          a flag taking no value: the base with it must differ from the base without.
  Writes(value) an output path: the command must succeed and write it, non-empty.
  Refused(value, why)  the command must exit 2 with one line naming the flag (the program's
                "ringside: --flag ..." or the parser's "--flag: why").
  Exempt(why)   changes nothing a run can compare, for the reason given (--help, a bound on
                waiting for a hung peer, an effect on measured times only).
Each takes `base=` (flags added to, or replacing those of, the command's base line, where the
base makes the flag moot: TP overlap needs TP) and `drop=` (flags or words of the base the
checks go without).

Exit 0 when every flag behaves as its entry says; 1 otherwise, one line per failure.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
KINETO2 = os.path.join(HERE, "fixtures", "kineto", "ring2")
CALIBRATE_KNOWN = os.path.join(HERE, "fixtures", "calibrate", "known")


class Spec:
    def __init__(self, kind, a=None, b=None, why="", base=None, drop=()):
        self.kind, self.a, self.b, self.why, self.base, self.drop = kind, a, b, why, base, tuple(drop)


def Values(a, b, **kw):
    return Spec("values", a, b, **kw)


def On(**kw):
    return Spec("on", **kw)


def Writes(value, **kw):
    return Spec("writes", value, **kw)


def Refused(value, why, **kw):
    return Spec("refused", value, why=why, **kw)


def Exempt(why):
    return Spec("exempt", why=why)


# A small layer every command runs in well under a second.
LAYER = ["--seq", "128", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128"]
# A layer large enough that its sizes, not a kernel's fixed costs, set the modeled times: the
# model's commands dry-run it in the same time (a dry run does no math).
BIG = ["--seq", "8192", "--hidden", "1024", "--heads", "8", "--kv-heads", "4", "--ffn", "4096"]
# The model charges a dropout pass at any p (memory-bound, beside the bias add; no mask is kept:
# Philox makes it again), so p moves no modeled number. The validation cases give the published
# runs' p (0 or 0.1) as the layer they describe: p is the layer's, not refused.
MODEL_DROPOUT = Exempt("the model charges one memory-bound dropout pass at any p and keeps no mask (Philox), so p "
                       "moves no modeled number; the validation cases state their runs' p")
# A dry run draws no numbers: --seed draws only --docs random:N's lengths there.
DRY_SEED = [Refused("7", "a dry run draws no numbers; --seed draws only --docs random:N's lengths"),
            Values("7", "99", base=["--docs", "random:3"])]

# The layer flags every subcommand shares (src/cli/options.cpp, add_config_flags).
HELP = Exempt("prints the command's help and exits 0 (it is the help)")
CAUSAL = Exempt("the default (a causal mask), stated: --no-causal is swept, and no preset turns the mask off")
ROPE = Exempt("the default (RoPE on), stated: --no-rope is swept, and every preset has RoPE")


def layer_flags(recompute=True, layout=True, big=False):
    """The layer flags' entries for LAYER, or with `big` for BIG."""
    seq, docs = (("4096", "16384"), ("1024,7168", "4096,4096")) if big else (("192", "256"), ("16,112", "64,64"))
    heads, kv_heads = (("4", "16"), ("2", "8")) if big else (("2", "8"), ("1", "4"))
    hidden, ffn = (("512", "2048"), ("2048", "8192")) if big else (("32", "128"), ("96", "256"))
    flags = {
        "--preset": Values("llama3-8b", "gpt3-175b"),  # the sizes given override its h, H, Hkv, f: its norm, MLP, biases stay
        "--batch": Values("2", "3"),
        "--seq": Values(*seq),
        "--hidden": Values(*hidden),
        "--heads": Values(*heads),
        "--kv-heads": Values(*kv_heads),
        "--ffn": Values(*ffn),
        "--norm": Values("layernorm", "rmsnorm"),
        "--mlp": Values("gelu", "swiglu"),
        "--bias": On(base=["--preset", "llama3-8b"]),  # after a preset without biases
        "--no-bias": On(),
        "--causal": CAUSAL,
        "--no-causal": On(),
        "--rope": ROPE,
        "--no-rope": On(),
        "--dropout": Values("0", "0.3"),
        "--seed": Values("7", "99"),
        "--docs": Values(*docs),
        "--window": Values("16", "48"),
        "--rope-positions": Values("document", "global", base=["--docs", docs[0]]),  # one document: the same positions
    }
    if layout:
        flags["--layout"] = Values("contiguous", "striped")
    if recompute:
        flags["--recompute"] = Values("selective", "full")
    return flags


def software_flags(step_and_fp8=True, tp_base=None, kernel_base=None):
    """The modeling flags every command that models takes (issue 59: cli's add_modeling_flags):
    --efficiency, --attention-kernel, --merge, --stack, --tp-comm-overlap and --no-tp-comm-overlap;
    with step_and_fp8, --fp8-recipe and --grad-reduce. `kernel_base`: a profile with both fa2's and
    fa3's rates where the command's default has fa2's alone (the twin's a100-nvlink)."""
    flags = {
        "--efficiency": Values("achieved", "ideal"),
        "--attention-kernel": Values("fa2", "fa3", base=kernel_base),
        "--merge": Values("fused", "unfused"),
        "--stack": Values("megatron", "deepspeed"),
        # TP overlap needs TP: on a TP group, against the stacks' default (megatron: off; torchtitan: on).
        "--tp-comm-overlap": On(base=tp_base),
        # Every built-in stack leaves TP overlap off: against a stack that turns it on.
        "--no-tp-comm-overlap": On(base=tp_base + ["--stack", "tp-overlap.json"]),
    }
    if step_and_fp8:
        flags["--fp8-recipe"] = Values("delayed", "current", base=["--dtype", "fp8"])
        flags["--grad-reduce"] = Values("fp32", "weights", base=["--gbs", "4"])
    return flags


def parallel_flags(ranks_flag="--ranks"):
    """--tp, --cp, --cp-comm, --cp-a2a, --order: the configuration as degrees instead of a name."""
    return {
        "--tp": Values("1", "2", drop=["--strategy"]),
        "--cp": Values("1", "2", drop=["--strategy"]),
        "--cp-comm": Values("p2p", "a2a", drop=["--strategy"], base=["--cp", "2"]),
        "--cp-a2a": Values("2", "4", drop=["--strategy"], base=[ranks_flag, "4", "--cp", "4", "--cp-comm", "a2a+p2p"]),
        "--order": Values("tp-cp", "cp-tp", drop=["--strategy"], base=[ranks_flag, "4", "--tp", "2", "--cp", "2"]),
    }


NO_GPU = "refused: no GPU on this machine (the device tests run the GPU path)"
TIMEOUT = Exempt("a bound on waiting for a peer that never answers: a run that finishes prints the same "
                 "(tests/reliability and the MPI tests stop a rank and assert it)")
LINK = Exempt("slows the local backend's transfers, which changes measured times only (they vary run to run); "
              "tests/link_lower_bound.py holds every send of a run and a compare to the link's latency + bytes / bandwidth")


def run_like(command):
    """run and compare: the local run, its trace and its modeled twin."""
    flags = {
        "-h": HELP,
        "--ranks": Values("2", "4"),
        "--backend": Refused("mpi", "this process was not started by mpirun"),
        "--device": Refused("cuda", NO_GPU),
        "--timeout": TIMEOUT,
        "--trace": Writes("t.json"),
        "--link-bandwidth": LINK,
        "--link-latency": LINK,
        "--hw": Values("h100-ib", "h200"),
    }
    flags.update(layer_flags())
    flags.update(software_flags(step_and_fp8=False, tp_base=["--ranks", "2", "--tp", "2", "--cp", "1"], kernel_base=["--hw", "h100-nvlink"]))
    flags.update(parallel_flags())
    if command == "run":
        flags["--strategy"] = Values("ring", "ulysses")
        flags["--dump"] = Writes("dump")
        # run checks nothing against a reference: the values it computes are in its dump.
        flags["--seed"] = Values("7", "99", base=["--dump", "d"])
        flags["--dropout"] = Values("0", "0.3", base=["--dump", "d"])
        flags["--tp-comm-overlap"].drop = flags["--no-tp-comm-overlap"].drop = ("--strategy",)
    else:
        flags["--strategies"] = Values("ring", "ulysses")
        flags["--json"] = Writes("c2.json")
        for f in ("--tp", "--cp", "--cp-comm", "--cp-a2a", "--order"):
            flags[f].drop = ("--strategies",)
        flags["--tp-comm-overlap"].drop = flags["--no-tp-comm-overlap"].drop = ("--strategies",)
    return flags


def model_flags():
    flags = {
        "-h": HELP,
        "--strategy": Values("ring", "ulysses"),
        "--ranks": Values("2", "4"),
        "--hw": Values("h100-ib", "h200"),
        "--dtype": Values("fp32", "fp8"),
        "--only": Values(None, "attention"),
        "--json": Writes("m2.json"),
        "--trace": Writes("t.json"),
        "--gbs": Values("2", "4"),
        "--pp": Values("1", "2", base=["--gbs", "4", "--layers", "4"]),
        "--vp": Values("1", "2", base=["--gbs", "4", "--layers", "4", "--pp", "2"]),
        "--dp": Values("1", "2", base=["--gbs", "4"]),
        "--zero": Values("0", "3", base=["--gbs", "4"]),
        "--layers": Values("2", "4", base=["--gbs", "4"]),
        "--vocab": Values("1000", "32000", base=["--gbs", "4"]),
        "--no-overlap-grad-reduce": On(base=["--gbs", "4", "--dp", "2"]),
        "--overlap-grad-reduce": On(),
        "--from": Values("r2.json", "r4.json", drop=["--strategy", "--ranks"]),
        "--compare": Values("r2.json", KINETO2),
        "--align": Values("collectives", "none", base=["--compare", KINETO2]),
    }
    flags.update(layer_flags(big=True))
    flags["--seed"] = DRY_SEED
    flags["--dropout"] = MODEL_DROPOUT
    flags.update(parallel_flags())
    flags.update(software_flags(tp_base=["--ranks", "2", "--tp", "2", "--cp", "1"]))
    flags["--tp-comm-overlap"].drop = flags["--no-tp-comm-overlap"].drop = ("--strategy",)
    return flags


def plan_flags():
    flags = {
        "-h": HELP,
        "--gpus": Values("2", "8"),
        "--hw": Values("h100-ib", "h200"),
        "--recompute": Values("none", "full"),
        "--layers": Values("2", "4"),
        "--top": Values("1", "3"),
        "--dtype": Values("fp32", "fp8"),
        "--trace": Writes("t.json"),
        "--json": Writes("p2.json"),
        "--gbs": Values("4", "8"),
        "--mbs": Values("1", "2", base=["--gbs", "8"]),
        "--pp": Values("1", "2", base=["--gbs", "8", "--layers", "4"]),
        "--vp": Values("1", "2", base=["--gbs", "8", "--layers", "4", "--pp", "2"]),
        "--dp": Values("1", "2", base=["--gbs", "8"]),
        "--zero": Values("0", "3", base=["--gbs", "8"]),
        "--no-overlap-grad-reduce": On(base=["--gbs", "8"]),
        "--exhaustive": On(base=["--gbs", "8"]),
        # Issue 59: the schemes weighed (default: those TransformerEngine runs; all adds the pass-Q ring).
        "--cp-comm": [Values(None, "all"), Values("p2p", "p2p-q"), Values("p2p", "a2a", base=["--gbs", "8"]),
                      Refused("bogus", "not a registered scheme")],
        # Issue 61: the frameworks whose settings for the winner and the runner-up it prints.
        "--emit": [Values("megatron", "torchtitan"), Values(None, "deepspeed", base=["--gbs", "8"]),
                   Refused("nemo", "not in")],
        # Issue 61: the longest s that fits, in steps of --granularity tokens (no --seq: s is the answer).
        "--max-seq": On(drop=["--seq"]),
        "--granularity": [Values("1000", "3000", base=["--max-seq"], drop=["--seq"]), Refused("0", "not in range")],
    }
    flags.update(layer_flags(recompute=False, big=True))
    flags["--seed"] = DRY_SEED
    flags["--dropout"] = MODEL_DROPOUT
    flags.update(software_flags(tp_base=[]))
    flags["--grad-reduce"].base = ["--gbs", "8"]
    return flags


def lesson_flags():
    return {
        "-h": HELP,
        "number": Values("1", "2", drop=["1"]),
        "--no-pause": On(drop=["--no-pause"]),  # pauses read stdin, here /dev/null: the prompts are printed
        "--trace": Writes("l3.json"),
        "--hw": Values("h100-ib", "h200"),
        "--update-chapter": Values(None, "chapter.md"),  # a copy of lesson 1's chapter, rewritten or said to be current
        "--json": Writes("l2.json"),
    }


def bench_layer_flags():
    flags = {"-h": HELP, "--repetitions": Exempt("runs of each, the best counted: changes measured times only")}
    flags.update(layer_flags(recompute=False))
    flags["--layout"] = Refused("zigzag", "the reference layer runs the whole sequence on one device")
    # Issue 58: the same layers in PyTorch eager; where the Python has no torch, a line says so.
    flags["--peer"] = Values(None, "pytorch")
    # python3 (no torch on CI: skipped, a line) against a fake peer that answers (its rows).
    flags["--python"] = Values("python3", os.path.join(HERE, "fake_peer_python.py"), base=["--peer", "pytorch"])
    # What the layer computes but its FLOPs (the table's work column) do not count:
    for f in ("--dropout", "--seed", "--rope-positions", "--no-rope"):
        flags[f] = Exempt("changes token-wise work or the values drawn, not the FLOPs the table counts: measured times only")
    return flags


def bench_trace_flags():
    """bench trace times one run of a layer, traced and not: the layer is what it times."""
    flags = {"-h": HELP, "--strategy": Values("ring", "ulysses"), "--ranks": Values("2", "4"),
             "--repetitions": Exempt("runs of each, the best counted: changes measured times only")}
    flags.update(layer_flags())
    timed = Exempt("the size or values of the layer timed: changes measured times only, not the hooks a run passes "
                   "(`run`, swept with every layer flag, shows what it computes)")
    for f in ("--seq", "--hidden", "--ffn", "--batch", "--kv-heads", "--dropout", "--seed", "--docs", "--window",
              "--rope-positions", "--norm", "--mlp", "--no-bias", "--bias", "--no-rope", "--layout", "--recompute",
              "--preset", "--heads", "--no-causal"):
        flags[f] = timed
    return flags


# Every command: its base command line (run in a directory of its own; files by relative name) and
# an entry for each of its flags and positionals. `measured`: the command prints measured times.
SWEEP = {
    "reference": {
        # --check prints each tensor's error against fp64: what the layer computed, to the bit.
        "base": ["reference", "--check"] + LAYER,
        "measured": True,
        "flags": dict(
            {"-h": HELP, "--dtype": Values("f32", "f64", drop=["--check"]), "--check": On(drop=["--check"]),
             "--dump": Writes("dump")},
            **layer_flags(layout=False),
            **{"--layout": Refused("zigzag", "the reference runs the whole sequence on one device")}),
    },
    "run": {"base": ["run", "--strategy", "ring", "--ranks", "2"] + LAYER, "measured": True, "flags": run_like("run")},
    "compare": {"base": ["compare", "--strategies", "ring", "--ranks", "2", "--json", "c.json"] + LAYER, "measured": True,
                "flags": run_like("compare")},
    "model": {"base": ["model", "--strategy", "ring", "--ranks", "2", "--json", "m.json"] + BIG, "flags": model_flags()},
    "plan": {"base": ["plan", "--gpus", "4", "--json", "p.json"] + BIG, "flags": plan_flags()},
    "lesson": {"base": ["lesson", "1", "--no-pause", "--trace", "lt.json", "--json", "l.json"], "flags": lesson_flags()},
    "validate": {
        "base": ["validate", "megatron-step-175b-full", "--json", "v.json"],
        "flags": {
            "-h": HELP,
            "cases": Values("megatron-step-175b-selective", "rfa-ring-fwd-a100", drop=["megatron-step-175b-full"]),
            "--json": Writes("v2.json"),
            "--leave-out": Values(None, "korthikanti-2022", drop=["megatron-step-175b-full"]),
            "--refit": On(drop=["megatron-step-175b-full"]),
            "--bands": Writes("bands.json", drop=["megatron-step-175b-full"]),
        },
    },
    "calibrate": {
        "base": ["calibrate", CALIBRATE_KNOWN, "--out", "c.json"],
        "flags": {
            "-h": HELP,
            "run": Values(CALIBRATE_KNOWN, CALIBRATE_KNOWN + "-4k", drop=[CALIBRATE_KNOWN]),
            "--out": Writes("c2.json"),
            "--base": Values("h100-nvlink", "h200"),
            "--stack": Values("megatron", "torchtitan"),
            "--name": Exempt("sets the profile's name, which is all it changes (the sweep masks a flag's echoed value); the "
                             "README's CTest writes --name my-cluster and holds model's 'modeled (my-cluster)' column to it"),
            "--gpus-per-node": Values("1", "4"),
            "--min-samples": Values("1", "100"),
        },
    },
    "trace-stats": {
        "base": ["trace-stats", "r2.json", "--json", "s.json"],
        "flags": {
            "-h": HELP,
            "files": Values("r2.json", "r4.json", drop=["r2.json"]),
            "--align": Values("collectives", "none", base=[KINETO2], drop=["r2.json"]),
            "--json": Writes("s2.json"),
        },
    },
    "bench kernels": {
        "measures": r"\b(ok|BELOW TARGET)\b",
        "base": ["bench", "kernels", "--seq", "128", "--heads", "2", "--head-dim", "32", "--min-time", "0.01", "--repetitions",
                 "1", "--single-shape"],
        "measured": True,
        "flags": {
            "-h": HELP,
            "--seq": Values("64", "256"),
            "--heads": Values("1", "4"),
            "--head-dim": Values("16", "64"),
            "--causal": CAUSAL,
            "--no-causal": On(),
            "--min-time": Exempt("how long each benchmark runs: changes measured times only"),
            "--repetitions": Exempt("rounds of every benchmark, the best of each reported: changes measured times only"),
            "--isa": Values("generic", "all"),
            "--single-shape": On(drop=["--single-shape"]),
        },
    },
    "bench comm": {
        "base": ["bench", "comm", "--ranks", "2", "--max-bytes", "4096"],
        "measured": True,
        "flags": {
            "-h": HELP,
            "--backend": Refused("mpi", "this process was not started by mpirun"),
            "--ranks": Values("2", "4"),
            "--min-bytes": Values("64", "2048"),
            "--max-bytes": Values("2048", "8192"),
            "--timeout": TIMEOUT,
        },
    },
    "bench trace": {
        "base": ["bench", "trace", "--repetitions", "1", "--ranks", "2"] + LAYER,
        "measured": True,
        "measures": r"\b(OK|ABOVE TARGET)\b",
        "flags": bench_trace_flags(),
    },
    "bench model": {
        "base": ["bench", "model", "--ranks", "4"] + BIG,
        "measured": True,
        "measures": r"\b(OK|SLOW)\b|\b\d+\.\d+s\b",  # its verdicts and measured seconds ("0.01s")
        "flags": {**{"-h": HELP, "--ranks": Values("2", "4"), "--hw": Values("h100-ib", "h200")},
                  **layer_flags(big=True),
                  "--seed": [DRY_SEED[0], Exempt("with --docs random:N it draws their lengths, which move the modeled layer "
                                                 "below the table's two digits (`model`, swept with it, shows them)")],
                  # A memory-bound pass of this layer: `model` prints its effect (its JSON's seconds).
                  **{f: Exempt("changes the modeled layer by under 0.01%: below the table's two digits (`model`, swept "
                               "with it, shows it)") for f in ("--norm", "--dropout")}},
    },
    "bench plan": {
        # 70B's weights, gradients and Adam state sharded over CP (the layer plan's memory count)
        # need 16 GPUs or more to fit at all.
        "base": ["bench", "plan", "--gpus", "16", "--seq", "2048"],
        "measured": True,
        "measures": r"\b(NOT MET|MET)\b",
        "flags": {"-h": HELP, "--gpus": Values("16", "32"), "--gbs": Values("8", "16", base=["--gpus", "256"]),
                  "--seq": Values("1024", "4096"),
                  "--hw": Values("h100-ib", "h200")},
    },
    "bench layer": {"base": ["bench", "layer", "--repetitions", "1"] + LAYER, "measured": True, "measures": r"\b(ok|BELOW TARGET)\b",
                    "flags": bench_layer_flags()},
    # A GPU benchmark: on a machine without one the command itself is refused (exit 2), so each of
    # its flags would be; the device tests run it where there is a GPU.
    "bench cuda": {"skip": "needs a GPU (CUDA build and device): refused here as a whole; run on the device machine"},
}

# ---------------------------------------------------------------- the CLI, as its --help says


def run_cmd(ringside, args, cwd, timeout=120):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    try:
        p = subprocess.run([ringside] + args, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return 124, "", f"flag_sweep: timed out after {timeout} s"
    return p.returncode, p.stdout, p.stderr


SECTION = re.compile(r"^([A-Z][\w ]*):$")
OPTION = re.compile(r"^  ((?:-\w,)?--[\w-]+|-h,--help)\b")
POSITIONAL = re.compile(r"^  ([a-z][\w-]*) [A-Z]")


def parse_help(text):
    """(subcommands, flags, positionals) of one --help text."""
    subs, flags, positionals, section = [], [], [], None
    for line in text.splitlines():
        m = SECTION.match(line)
        if m:
            section = m.group(1)
            continue
        if section == "Subcommands":
            m = re.match(r"^  ([a-z][\w-]*)\s", line)
            if m:
                subs.append(m.group(1))
        elif section == "Positionals":
            m = POSITIONAL.match(line)
            if m:
                positionals.append(m.group(1))
        elif section and section != "Examples":
            m = OPTION.match(line)
            if m:
                name = m.group(1)
                flags.append("-h" if name.startswith("-h,") else name)
    return subs, flags, positionals


def commands(ringside, cwd):
    """{"run": [flags and positionals], "bench kernels": [...], ...}: every leaf subcommand."""
    out = {}

    def walk(path):
        rc, text, err = run_cmd(ringside, path + ["--help"], cwd)
        if rc != 0:
            raise SystemExit(f"flag_sweep: {' '.join(path)} --help exited {rc}: {err.strip()}")
        subs, flags, positionals = parse_help(text)
        if path and not subs:
            out[" ".join(path)] = flags + positionals
        for s in subs:
            walk(path + [s])

    walk([])
    return out


# ---------------------------------------------------------------- one run's outputs, compared

NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?(?:%|\s?(?:ns|us|ms|s|GFLOP/s|TFLOP/s|MFLOP/s|GB/s|MB/s)\b)?")
# A number with a unit of time, rate or share: what a measurement prints.
MEASURE = re.compile(r"(?:%|\s?(?:ns|us|ms|s|GFLOP/s|TFLOP/s|MFLOP/s|GB/s|MB/s))$")


def flatten(value, path="", out=None):
    """A JSON document as "path = value" lines (object keys sorted, array items by index)."""
    if out is None:
        out = []
    if isinstance(value, dict):
        for k in sorted(value):
            flatten(value[k], f"{path}.{k}", out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{path}[{i}]", out)
    else:
        out.append(f"{path} = {json.dumps(value)}")
    return out


def outputs(stdout, cwd, files, measures=None):
    """What a run said: its stdout's lines and each file's (JSON flattened), by name."""
    out = {"stdout": [normal(l, measures) for l in stdout.splitlines()]}
    for f in files:
        p = os.path.join(cwd, f)
        if os.path.isdir(p):
            # A dump: each file's name and content (the tensors' bits), the manifest flattened.
            out[f] = [f"{n} {hashlib.sha1(open(os.path.join(p, n), 'rb').read()).hexdigest()}" for n in sorted(os.listdir(p))
                      if n != "manifest.json"]
            manifest = os.path.join(p, "manifest.json")
            if os.path.exists(manifest):
                out[f + "/manifest.json"] = flatten(json.load(open(manifest)))
        elif os.path.exists(p):
            try:
                out[f] = flatten(json.load(open(p)))
            except ValueError:
                out[f] = [normal(l) for l in open(p, errors="replace").read().splitlines()]
    return out


# What varies from run to run whatever the flags, in any command's output.
ALWAYS_VARYING = [re.compile(r"load average [\d.]+")]


def normal(line, measures=None):
    """A line with its spacing collapsed (a table pads a number to its width) and what always
    varies masked; `measures`, a regex of what a benchmark measures that masking by position misses
    ("ok", "BELOW TARGET"), read <M>."""
    line = " ".join(line.split())
    for pattern in ALWAYS_VARYING:
        line = pattern.sub("<varies>", line)
    return re.sub(measures, "<M>", line) if measures else line


def template(line):
    return NUMBER.sub("#", line)


class Volatile:
    """The numbers that differ between identical runs: by output, line template, the line's
    occurrence among that template's (the k-th held against the k-th of the other runs: a
    measured table's row and a modeled table's row may share a template) and the number's place
    in the line."""

    def __init__(self, runs):
        self.masked = {}
        for name in runs[0]:
            rows = []  # per run: template -> the numbers of its lines, in order
            for run in runs:
                by = {}
                for line in run.get(name, []):
                    by.setdefault(template(line), []).append(NUMBER.findall(line))
                rows.append(by)
            for t in set().union(*rows):
                count = max(len(r.get(t, [])) for r in rows)
                for k in range(count):
                    seen = [r[t][k] if k < len(r.get(t, [])) else None for r in rows]
                    if any(x is None for x in seen):
                        vary = {-1}  # a line some runs have and others not: all its numbers
                    else:
                        width = max(len(x) for x in seen)
                        vary = {j for j in range(width) if len({x[j] if j < len(x) else None for x in seen}) > 1}
                    if vary:
                        self.masked.setdefault((name, t), {})[k] = vary

    def mask(self, name, lines):
        out, seen = [], {}
        for line in lines:
            t = template(line)
            k = seen[t] = seen.get(t, -1) + 1
            by_k = self.masked.get((name, t), {})
            # a line past those the runs had: what varied in any of its template's lines
            vary = by_k.get(k) if k < max(by_k, default=-1) + 1 else set().union(*by_k.values()) if by_k else None
            if not vary:
                out.append(line)
                continue
            # The numbers that varied, and in a line where some did, every measurement beside them
            # (a time, a rate or a share that happened to agree in the runs compared).
            counter = iter(range(10**9))
            out.append(NUMBER.sub(lambda m: "#" if next(counter) in vary or -1 in vary or MEASURE.search(m.group(0))
                                  else m.group(0), line))
        return out


def echo_masked(lines, values):
    """The lines with each value read <V>: a word as a whole word; a number as any number equal
    to it as written ("0" and the JSON's 0.0)."""
    for v in values:
        if not v:
            continue
        try:
            x = float(v)
        except ValueError:
            pattern = re.compile(r"(?<![\w.-])" + re.escape(v) + r"(?![\w-]|\.\d)")
            lines = [pattern.sub("<V>", l) for l in lines]
            continue
        plain = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
        lines = [plain.sub(lambda m: "<V>" if float(m.group(0)) == x else m.group(0), l) for l in lines]
    return lines


def difference(vol, a, b, values):
    """The first line where two masked runs differ, or None."""
    def masked(name, lines):
        return echo_masked(vol.mask(name, lines), values)

    for name in sorted(set(a) | set(b)):
        la, lb = masked(name, a.get(name, [])), masked(name, b.get(name, []))
        if la != lb:
            for x, y in zip(la + ["<end>"], lb + ["<end>"]):
                if x != y:
                    return f"{name}: {x.strip()[:100]!r} / {y.strip()[:100]!r}"
    return None


# ---------------------------------------------------------------- the sweep


def with_flag(args, flag, value, positionals):
    """args with `flag value` (a positional: value in its place; "" : a flag alone)."""
    if flag in positionals:
        return args + [value]
    return args + ([flag] if value == "" else [flag, value])


def without(args, names):
    """args without the flags in `names` (and their values) and the bare words in `names`."""
    out, i = [], 0
    while i < len(args):
        n = 2 if args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--") else 1
        if args[i] not in names:
            out += args[i:i + n]
        i += n
    return out


def replaced(args, flag, value, positionals):
    """args with flag set to value, replacing the flag if args has it."""
    return with_flag(without(args, [flag]) if flag not in positionals else args, flag, value, positionals)


def output_files(args):
    """The files a command line writes: what its outputs are compared by besides stdout."""
    files = []
    for i, a in enumerate(args):
        if a in ("--json", "--trace", "--dump", "--bands") and i + 1 < len(args):
            files.append(args[i + 1])
    if "--update-chapter" in args:
        files.append(args[args.index("--update-chapter") + 1])
    return files


class Sweep:
    """Runs the command lines of the table's checks, each in a fresh directory under `work`."""

    def __init__(self, ringside, work, verbose):
        self.ringside, self.work, self.verbose = ringside, work, verbose
        self.count = 0
        self.gpu = shutil.which("nvidia-smi") is not None and subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True).returncode == 0

    def fresh_dir(self):
        self.count += 1
        d = os.path.join(self.work, f"r{self.count:04d}")
        os.makedirs(d)
        for f in ("r2.json", "r4.json", "chapter.md", "tp-overlap.json"):
            src = os.path.join(self.work, f)
            if os.path.exists(src):
                shutil.copy(src, d)
        return d

    def go(self, args):
        d = self.fresh_dir()
        rc, out, err = run_cmd(self.ringside, args, d)
        return rc, out, err, d

    def prepare(self):
        """The inputs some flags read: recorded traces of 2 and 4 ranks, a chapter to rewrite."""
        for p, name in ((2, "r2.json"), (4, "r4.json")):
            rc, _, err = run_cmd(self.ringside, ["run", "--strategy", "ring", "--ranks", str(p), "--trace", name] + LAYER,
                                 self.work)
            if rc != 0:
                raise SystemExit(f"flag_sweep: could not record {name}: {err.strip()}")
        shutil.copy(os.path.join(SOURCE, "lessons", "01-memory-wall", "README.md"), os.path.join(self.work, "chapter.md"))
        stack = json.load(open(os.path.join(SOURCE, "src", "model", "stacks", "megatron.json")))
        stack["name"], stack["tp_comm_overlap"]["default"] = "tp-overlap", True
        json.dump(stack, open(os.path.join(self.work, "tp-overlap.json"), "w"))

    def check_command(self, name, entry, found, pool):
        """One command's failures and notes, as lines: `found` its flags and positionals as its
        --help lists them, `entry` its SWEEP entry."""
        if "skip" in entry:
            return [], [f"{name}: skipped ({entry['skip']})"]
        failures, notes = [], []
        table = entry["flags"]
        flags = [f for f in found if f != "--version"]
        positionals = {f for f in flags if not f.startswith("-")}
        for f in flags:
            if f not in table:
                failures.append(f"{name} {f}: not in the sweep's table (tests/flag_sweep.py): give it two values whose "
                                f"effects differ, or a refusal or exemption with the reason")
        for f in table:
            if f not in flags:
                failures.append(f"{name} {f}: in the sweep's table, but `ringside {name} --help` does not list it")
        base = entry["base"]
        runs = 3 if entry.get("measured") else 2

        def base_of(spec):
            """The command line a flag's variants start from: the base without spec.drop, with spec.base."""
            args, extra, j = without(list(base), list(spec.drop)), list(spec.base or []), 0
            while j < len(extra):
                if extra[j].startswith("--") and j + 1 < len(extra) and not extra[j + 1].startswith("--"):
                    args = replaced(args, extra[j], extra[j + 1], positionals)
                    j += 2
                else:
                    args.append(extra[j])
                    j += 1
            return tuple(args)

        def variants(flag, spec, b):
            """The command lines a spec compares (values, on) or checks (writes, refused)."""
            if spec.kind == "values":
                return [b if v is None else tuple(replaced(list(b), flag, v, positionals)) for v in (spec.a, spec.b)]
            if spec.kind == "on":
                return [b, b + (flag,)]
            return [tuple(replaced(list(b), flag, spec.a, positionals))]

        checks = [(flag, spec) for flag, specs in table.items() if flag in flags
                  for spec in (specs if isinstance(specs, list) else [specs])]
        # Each comparison's first command line runs `runs` times (what varies between identical
        # runs is masked), every other line once; two at a time.
        repeated, once = {}, {}
        for flag, spec in checks:
            if spec.kind == "exempt":
                continue
            lines = variants(flag, spec, base_of(spec))
            if spec.kind in ("values", "on"):
                repeated.setdefault(lines[0], None)
            for v in lines:
                once.setdefault(v, None)
        todo = [(k, i) for k in repeated for i in range(runs)] + [(k, 0) for k in once if k not in repeated]
        results = {}
        for (k, i), res in zip(todo, pool.map(lambda t: self.go(list(t[0])), todo)):
            results.setdefault(k, []).append(res)
        if self.verbose:
            for k, rs in results.items():
                print(f"  [{rs[0][0]}] ringside {' '.join(k)}", file=sys.stderr)

        measures = entry.get("measures")

        def outs(k):
            rc, out, err, d = results[k][0]
            return outputs(out, d, output_files(list(k)), measures)

        def volatile(k):
            return Volatile([outputs(out, d, output_files(list(k)), measures) for rc, out, err, d in results[k]])

        for flag, spec in checks:
            shown = f"{name} {flag}"
            if spec.kind == "exempt":
                notes.append(f"{shown}: exempt: {spec.why}")
                continue
            runs_of = variants(flag, spec, base_of(spec))
            if spec.kind == "refused":
                if spec.why.startswith("refused: no GPU") and self.gpu:
                    notes.append(f"{shown}: skipped (a GPU is here)")
                    continue
                rc, out, err, d = results[runs_of[0]][0]
                # A refusal is one line naming the flag: the program's ("ringside: --seed ...") or the parser's ("--seed: ...").
                if rc != 2 or not re.search(r"^(ringside: .*)?" + re.escape(flag) + r"\b", err, re.M):
                    failures.append(f"{shown} {spec.a}: should be refused (exit 2, a line naming {flag}: {spec.why}); "
                                    f"exited {rc}: {err.strip()[:160]!r} (`ringside {' '.join(runs_of[0])}`)")
                continue
            if spec.kind == "writes":
                rc, out, err, d = results[runs_of[0]][0]
                p = os.path.join(d, spec.a)
                written = os.path.isdir(p) and os.listdir(p) or os.path.isfile(p) and os.path.getsize(p) > 0
                if rc != 0 or not written:
                    failures.append(f"{shown} {spec.a}: should write {spec.a}; exited {rc}, "
                                    f"{'wrote it' if written else 'wrote nothing'}: {err.strip()[:160]!r}")
                continue
            ka, kb = runs_of
            if spec.kind == "values":
                values = [v for v in (spec.a, spec.b) if v]
                what = f"{flag} {spec.a if spec.a is not None else '(left out)'} and {flag} {spec.b}"
            else:
                values, what = [], f"{flag} and its absence"
            bad = [(k, r) for k in (ka, kb) for r in results[k] if r[0] != 0]
            if bad:
                k, (rc, out, err, d) = bad[0]
                failures.append(f"{shown}: `ringside {' '.join(k)}` exited {rc}: {err.strip()[:200]!r}")
                continue
            diff = difference(volatile(ka), outs(ka), outs(kb), values)
            if diff is None:
                failures.append(f"{shown}: said but not used: {what} give the same stdout, JSON and trace "
                                f"(`ringside {' '.join(kb)}`)")
            elif self.verbose:
                notes.append(f"{shown}: changes {diff}")
        return failures, notes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ringside")
    ap.add_argument("work")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--verbose", "-v", action="store_true")
    a = ap.parse_args()
    ringside = os.path.abspath(a.ringside)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    sweep = Sweep(ringside, a.work, a.verbose)
    found = commands(ringside, a.work)
    failures, notes = [], []
    for name in sorted(found):
        if name not in SWEEP:
            failures.append(f"{name}: a command the sweep's table does not have (tests/flag_sweep.py SWEEP)")
    for name in SWEEP:
        if name not in found:
            failures.append(f"{name}: in the sweep's table, but `ringside --help` does not list it")
    sweep.prepare()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for name in sorted(found):
            if name not in SWEEP or (a.only and name not in a.only):
                continue
            start = time.monotonic()
            f, n = sweep.check_command(name, SWEEP[name], found[name], pool)
            failures += f
            notes += n
            print(f"{name}: {len(found[name])} flags and positionals, {len(f)} failing ({time.monotonic() - start:.0f} s)",
                  flush=True)
    for n in notes:
        print("  " + n)
    for f in failures:
        print("FAIL " + f)
    print(f"flag sweep: {sweep.count} runs, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
