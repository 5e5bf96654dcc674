#!/usr/bin/env python3
"""Issue 60: profiles built from parts (a GPU on a system of link tiers) model every existing
profile exactly as the profiles they replaced did.

For each built-in profile that existed before the topology (0bf74f0), `ringside model` of a
layer (TP 4 x ring 4 on 16 GPUs: the ring across InfiniBand) and of a whole step (that group in
PP 2 x DP 2 on 64 GPUs: the pipeline and the gradients across InfiniBand) gives the times
recorded by the binary of 0bf74f0 in tests/golden/profile_times.json, to 1e-12 relative.

    profile_times_unchanged.py RINGSIDE GOLDEN [--write]   (--write records GOLDEN with RINGSIDE)
"""
import json
import subprocess
import sys
import tempfile

PROFILES = ["a100-nvlink", "a800-nvlink", "h100-96gb-500w", "h100-ib", "h100-nvlink", "h200", "h800-nvlink"]
LAYER = ["--preset", "llama3-8b", "--seq", "16384", "--ranks", "16", "--tp", "4", "--cp", "4"]
STEP = LAYER + ["--gbs", "64", "--pp", "2", "--dp", "2"]


def times(ringside, profile):
    out = {}
    for name, args in (("layer", LAYER), ("step", STEP)):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            subprocess.run([ringside, "model", *args, "--hw", profile, "--json", f.name], check=True, stdout=subprocess.DEVNULL)
            j = json.load(open(f.name))
        out[name] = {k: j["layer"][k] for k in ("forward_s", "backward_s", "total_s")}
        out[name]["exposed_s"] = j["exposed_s"]
        if name == "step":
            s = j["step"]
            out[name].update({k: s[k] for k in ("step_s", "pipeline_s", "dp_s", "optimizer_s", "tokens_per_s_per_gpu")})
            out[name].update({"exposed_" + k: v for k, v in s["exposed_s"].items()})
    return out


def main():
    ringside, golden = sys.argv[1], sys.argv[2]
    now = {p: times(ringside, p) for p in PROFILES}
    if "--write" in sys.argv:
        json.dump(now, open(golden, "w"), indent=1, sort_keys=True)
        open(golden, "a").write("\n")
        return 0
    then = json.load(open(golden))
    bad = 0
    for p in PROFILES:
        for run, values in then[p].items():
            for key, was in values.items():
                new = now[p][run][key]
                if abs(new - was) > 1e-12 * max(abs(was), 1e-30):
                    print(f"{p} {run} {key}: {was} before the topology, {new} now")
                    bad += 1
    checked = sum(len(v) for p in PROFILES for v in then[p].values())
    print(f"{checked - bad} of {checked} modeled times of {len(PROFILES)} profiles unchanged")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
