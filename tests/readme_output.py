#!/usr/bin/env python3
"""Holds a block the README quotes to the command that prints it (a stale README fails).

Usage: readme_output.py README NAME COMMAND...
The README marks the block with `<!-- output: NAME -->` right above a ``` fence; every line of
the block must be a line of COMMAND's output (trailing spaces aside), in the same order.
"""
import subprocess
import sys


def main():
    readme, name, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = open(readme, encoding="utf-8").read().split("\n")
    mark = f"<!-- output: {name} -->"
    at = [i for i, line in enumerate(text) if line.strip() == mark]
    if len(at) != 1:
        raise SystemExit(f"{readme}: {len(at)} marks '{mark}', expected 1")
    i = at[0] + 1
    if not text[i].strip().startswith("```"):
        raise SystemExit(f"{readme}: '{mark}' is not followed by a ``` block")
    block = []
    for line in text[i + 1:]:
        if line.strip().startswith("```"):
            break
        block.append(line.rstrip())
    out = [line.rstrip() for line in subprocess.check_output(command, text=True).split("\n")]
    pos = 0
    for line in block:
        while pos < len(out) and out[pos] != line:
            pos += 1
        if pos == len(out):
            raise SystemExit(f"{readme}: the block '{name}' says\n  {line}\nwhich `{' '.join(command)}` does not print (in order)")
        pos += 1
    print(f"readme_output: the {len(block)} lines of '{name}' are what the command prints")


if __name__ == "__main__":
    main()
