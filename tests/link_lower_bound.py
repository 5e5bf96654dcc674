#!/usr/bin/env python3
"""Issue 57: run --link-bandwidth and --link-latency slow every transfer to the link they name.

Usage: link_lower_bound.py TRACE LATENCY_US GBPS

Every point-to-point send the trace's recorded groups hold (an event named "send ..." with
bytes; the modeled twins beside them are left out) lasts at least the link's time, latency + bytes / bandwidth: a lower bound, whatever the machine's load
(the local backend holds each transfer that long before it copies). Exit 1 naming the first
send that is faster, or when the trace has no sends.
"""
import json
import sys


def main(path, latency_us, gbps):
    t = json.load(open(path))
    other = t.get("otherData", {})
    twins = set(other.get("modeled_groups", {}))
    recorded = {p["pid"] for p in other.get("processes", []) if p.get("strategy") not in twins}
    sends = [e for e in t["traceEvents"] if e.get("ph") == "X" and e.get("pid") in recorded
             and e.get("name", "").startswith("send") and "bytes" in e.get("args", {})]
    if not sends:
        print(f"{path}: no sends")
        return 1
    for e in sends:
        floor = latency_us + e["args"]["bytes"] / (gbps * 1e3)
        if e["dur"] < floor:
            print(f"{path}: {e['name']} of {e['args']['bytes']} bytes took {e['dur']:.1f} us, below the link's {floor:.1f} us")
            return 1
    print(f"{path}: {len(sends)} sends, each at least latency + bytes / bandwidth "
          f"(shortest {min(e['dur'] for e in sends):.1f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))
