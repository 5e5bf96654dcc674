#!/usr/bin/env python3
"""A stand-in for the Python of `bench layer --peer pytorch` (issue 58). ringside runs it as
`PYTHON -c SCRIPT --config JSON`; it ignores SCRIPT and speaks the peer's protocol
(src/cli/peer_pytorch.py) rightly, in no time, or wrongly, as $RINGSIDE_FAKE_PEER says:
  (unset)        ready with the layer's parameter count, then 0.001 s and 0.002 s each round
  wrong-count    ready with one parameter more than the layer has
  hang-ready     says nothing and never exits
  hang-round     ready, then never answers a round
  die-round      ready, then exits with status 3 at the first round
  crash-round    ready, then dies of SIGSEGV at the first round
  garbage-round  ready, then answers a round with words
  script         writes its arguments (SCRIPT among them) as {"argv": [...]} to the file
                 $RINGSIDE_FAKE_PEER_OUT/<its pid>.json (whole or not at all), then says skip
A fake that hangs writes its pid to $RINGSIDE_FAKE_PEER_OUT, so that a test can see it is gone.
"""
import json
import os
import signal
import sys
import time


def param_count(c):
    """LayerConfig::param_count, written again."""
    d = c["h"] // c["H"]
    qkv, fc1 = (c["H"] + 2 * c["Hkv"]) * d, (2 if c["mlp"] == "swiglu" else 1) * c["f"]
    norm = (2 if c["norm"] == "layernorm" else 1) * c["h"]
    gemms = c["h"] * qkv + c["H"] * d * c["h"] + c["h"] * fc1 + c["f"] * c["h"]
    return gemms + 2 * norm + (qkv + fc1 + 2 * c["h"] if c["bias"] else 0)


def say(line):
    print(line, flush=True)


def hang():
    with open(os.environ["RINGSIDE_FAKE_PEER_OUT"], "w") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        time.sleep(60)


def main():
    mode = os.environ.get("RINGSIDE_FAKE_PEER", "")
    assert sys.argv[1] == "-c" and sys.argv[3] == "--config", sys.argv[1:4]
    config = json.loads(sys.argv[4])
    if mode == "script":
        out = os.path.join(os.environ["RINGSIDE_FAKE_PEER_OUT"], f"{os.getpid()}.json")
        with open(out + ".tmp", "w") as f:
            json.dump({"argv": sys.argv[1:]}, f)
        os.replace(out + ".tmp", out)
        return say("skip the fake peer only records its script")
    if mode == "hang-ready":
        hang()
    extra = 1 if mode == "wrong-count" else 0
    say(f"ready {param_count(config) + extra} 0.0-fake NONE 1")
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        if mode == "hang-round":
            hang()
        if mode == "die-round":
            sys.exit(3)
        if mode == "crash-round":
            os.kill(os.getpid(), signal.SIGSEGV)
        say("fast and slow" if mode == "garbage-round" else "0.001 0.002")


main()
