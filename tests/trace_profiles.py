#!/usr/bin/env python3
"""Issue 57: a trace names one profile per modeled group, and otherData agrees with the labels.

Usage: trace_profiles.py TRACE [--profile NAME] [TRACE [--profile NAME] ...]

For each ringside trace (lesson, model --trace, plan --trace, compare/run --trace with twins):
  - a group labelled "X (modeled, P)" is listed in otherData.modeled_groups with hardware P
    and of X, and every listed group is a label of the trace;
  - otherData.modeled_hardware, when present, is the profile of some modeled group (a twin's);
  - a modeled trace's otherData.hardware is the profile of its groups (one of them, for a plan
    on several profiles);
  - with --profile P after the file: every modeled group and both otherData profiles are P.
Prints one line per file; exit 1 with the first problem of each file that has one.
"""
import json
import re
import sys

LABEL = re.compile(r"^(.*) \(modeled, ([^()]+)\)$")


def name_of(profile):
    if isinstance(profile, dict):
        return profile.get("name", "")
    return profile if isinstance(profile, str) else ""


def problems(path, only):
    t = json.load(open(path))
    other = t.get("otherData", {})
    labels = other.get("strategies", [])
    groups = other.get("modeled_groups", {})
    if not isinstance(groups, dict):
        return [f"otherData.modeled_groups is a {type(groups).__name__}, not an object"]
    out = []
    for label in labels:
        m = LABEL.match(label)
        if not m:
            continue
        g = groups.get(label)
        if g is None:
            out.append(f"the group {label!r} is not in otherData.modeled_groups")
        elif g.get("hardware") != m.group(2) or g.get("of") != m.group(1):
            out.append(f"the group {label!r} is listed as {g.get('of')!r} on {g.get('hardware')!r}")
    for label in groups:
        if label not in labels:
            out.append(f"otherData.modeled_groups lists {label!r}, which no rank of the trace is")
    profiles = {g.get("hardware") for g in groups.values()}
    twins = name_of(other.get("modeled_hardware"))
    if "modeled_hardware" in other and twins not in profiles:
        out.append(f"otherData.modeled_hardware is {twins!r}, but the modeled groups are on {sorted(profiles)}")
    hardware = name_of(other.get("hardware"))
    if other.get("modeled") and profiles and hardware not in profiles:
        out.append(f"otherData.hardware is {hardware!r}, but the modeled groups are on {sorted(profiles)}")
    if only:
        named = profiles | ({twins} if "modeled_hardware" in other else set()) | ({hardware} if hardware else set())
        if named != {only}:
            out.append(f"the trace names {sorted(named)}, not {only!r} alone")
        if not named:
            out.append("the trace names no profile")
    return out


def main(argv):
    files, i = [], 0
    while i < len(argv):
        if argv[i] == "--profile":
            files[-1] = (files[-1][0], argv[i + 1])
            i += 2
        else:
            files.append((argv[i], None))
            i += 1
    failed = False
    for path, only in files:
        p = problems(path, only)
        print(f"{path}: {'OK' if not p else p[0]}")
        failed = failed or bool(p)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
