#!/usr/bin/env python3
"""compare's JSON is unchanged by a refactor: every field of the golden file (tests/golden/) is in
the new document with the same value, once what varies is set aside.

  compare_json_unchanged.py GOLDEN NEW          check (exit 1 naming each difference)
  compare_json_unchanged.py --normalise NEW     print NEW's normalised form (to regenerate GOLDEN)

What varies from run to run or machine to machine is not compared: wall-clock times (time_s,
forward_s, backward_s and every *_us, overlap, imbalance and bandwidth (*_gbps) of a measured timeline and its ring steps), and the
errors' last bits (they depend on the BLAS kernel set), which become whether they are below the
tolerance that the document itself states (each strategy's checks.tolerance: kTolerance). Everything else must be equal: the configuration, bytes, memory peaks, FLOPs, formulas,
verdicts, the load-balance table and the modeled twin (a deterministic replay). A field that the
new document adds is allowed; one that it drops or changes is not."""
import json
import sys

TIMES = {"time_s", "forward_s", "backward_s"}


def measured_timeline(t):
    """A measured timeline's deterministic part: bytes, FLOPs and memory, not its times (nor the
    bandwidths, *_gbps, that divide by them)."""
    if isinstance(t, dict):
        return {k: measured_timeline(v) for k, v in t.items()
                if not (k.endswith("_us") or k.endswith("_pct") or k.endswith("_gbps") or k in ("compute_imbalance", "imbalance"))}
    if isinstance(t, list):
        return [measured_timeline(v) for v in t]
    return t


def tolerance_of(doc):
    """The tolerance compare checked against, as its document states it (one for every strategy)."""
    stated = {s["checks"]["tolerance"] for s in doc["strategies"]}
    if len(stated) != 1:
        raise SystemExit(f"the document states {len(stated)} tolerances, {sorted(stated)}: expected one")
    return stated.pop()


def normalise(x, tolerance, key=""):
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k in TIMES or k == "ratio_to_fp32_reference":
                continue
            if k == "timeline" and key != "modeled":
                out[k] = measured_timeline(v)
            elif k == "errors":
                out[k] = {n: e < tolerance for n, e in v.items()}
            elif k == "worst":
                out[k] = {"below_tolerance": v["error"] < tolerance}
            else:
                out[k] = normalise(v, tolerance, k)
        return out
    if isinstance(x, list):
        return [normalise(v, tolerance, key) for v in x]
    return x


def differences(golden, new, path=""):
    if isinstance(golden, dict):
        if not isinstance(new, dict):
            yield f"{path}: an object in the golden file, {type(new).__name__} now"
            return
        for k, v in golden.items():
            if k not in new:
                yield f"{path}/{k}: missing now"
            else:
                yield from differences(v, new[k], f"{path}/{k}")
    elif isinstance(golden, list):
        if not isinstance(new, list) or len(new) != len(golden):
            yield f"{path}: a list of {len(golden)} in the golden file, {len(new) if isinstance(new, list) else new!r} now"
            return
        for i, (g, n) in enumerate(zip(golden, new)):
            yield from differences(g, n, f"{path}/{i}")
    elif golden != new:
        yield f"{path}: {golden!r} in the golden file, {new!r} now"


def main(argv):
    if len(argv) == 3 and argv[1] == "--normalise":
        doc = json.load(open(argv[2]))
        print(json.dumps(normalise(doc, tolerance_of(doc)), indent=1, sort_keys=True))
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    golden = json.load(open(argv[1]))
    doc = json.load(open(argv[2]))
    new = normalise(doc, tolerance_of(doc))
    diffs = list(differences(golden, new))
    for d in diffs[:40]:
        print(d)
    if diffs:
        print(f"{len(diffs)} differences from {argv[1]}")
        return 1
    print(f"compare's JSON equals {argv[1]} (apart from new fields and what varies)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
