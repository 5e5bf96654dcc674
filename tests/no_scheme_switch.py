#!/usr/bin/env python3
"""Nothing switches on a kind of context parallelism (issue 59).

A context-parallel scheme is a registered descriptor (src/parallel/cp_scheme.h); everything else
asks its fields. This guard fails when the old enum CpComm appears anywhere in src/, viz/ or
lessons/, or when a scheme's name is compared as a string (== or != beside the literal, or
strcmp with it) outside the registry (src/parallel/cp_scheme.cpp) and the scheme definitions at
the end of the algorithm files (after their "---- the scheme" line).

The names are read from the scheme definitions themselves (.name, .te_name, .strategy, and the
dashed spelling of each: all-gather), so a new scheme's names are guarded without editing this
file; the names the issue lists must be among them (a parse that found nothing would pass
vacuously). The "none" scheme's name is not a kind of context parallelism and "none" is compared
for other things (a step that computed nothing), so it is left out.

Usage: no_scheme_switch.py REPO_ROOT [--also FILE...]
  --also FILE: check FILE too, as if it sat in src/ (the guard's own test: a file holding a
  compare must fail it).
"""
import pathlib
import re
import sys

SCANNED = ("src", "viz", "lessons")
SOURCE_SUFFIXES = {".cpp", ".h", ".hpp", ".cc", ".cu", ".cuh", ".inc", ".py"}
REGISTRY = "src/parallel/cp_scheme.cpp"
# The names the issue lists: the parse must find every one.
ISSUE_NAMES = {"ring", "ulysses", "p2p", "a2a", "all_gather", "a2a+p2p", "p2p-q", "ring-q"}
# Compares that are not of a scheme: the same words naming other things. Each entry is
# (path, the line's text as it stands, why); an entry that matches no line fails the guard too,
# so the list cannot outlive the code it excuses.
ALLOWED = [
    ("src/model/schedule_passes.cpp", 'const bool gather = coll.name == "all_gather"',
     "a collective's name in the trace (TP's all-gather), not a scheme"),
    ("src/model/schedule_passes.cpp", 'coll.name != "all_gather"',
     "a collective's name in the trace (TP's all-gather), not a scheme"),
    ("src/cli/bench_comm.cpp", 'if (o_ == "all_gather")', "bench comm's collective operation, not a scheme"),
    ("lessons/02-megatron-sp/scenario.cpp", 'if (op == "all_gather" && phase == "forward")',
     "Megatron's TP collective in lesson 2, not a scheme"),
    ("lessons/02-megatron-sp/scenario.cpp", 'if (op == "all_gather") return', "Megatron's TP collective in lesson 2, not a scheme"),
    ("lessons/02-megatron-sp/scenario.cpp", 'const bool ag = e->name == "all_gather"', "a TP collective's name in lesson 2"),
    ("lessons/02-megatron-sp/scenario.cpp", 'e->name == "all_gather" ? gathers', "a TP collective's name in lesson 2"),
    ("lessons/05-ulysses/scenario.cpp", 'if (t.strategy == "ulysses" && t.rank == 0)',
     "the lesson finds the run it labelled \"ulysses\" itself (L.run(ulysses_plan, \"ulysses\")): a label, not a kind"),
]


def scheme_names(root):
    """Every --cp-comm name, TransformerEngine name, configuration token and dashed spelling the
    scheme definitions give, but "none"'s."""
    names = set()
    for path in sorted((root / "src" / "parallel").glob("*.cpp")):
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"static const CpScheme \w+\{(.*?)\n  \};", text, re.S):
            found = re.findall(r'\.(?:name|te_name)\s*=\s*"([^"]*)"', block)
            strategy = re.search(r"\.strategy\s*=\s*\{([^}]*)\}", block)
            if strategy:
                found += re.findall(r'"([^"]+)"', strategy.group(1))
            if "none" in found:
                continue
            for n in found:
                if n:
                    names.add(n)
                    names.add(n.replace("_", "-"))
    return names


def scheme_section_start(text):
    """The offset of an algorithm file's scheme definitions ("// ---- the scheme"), or None."""
    m = re.search(r"^// ---- the scheme", text, re.M)
    return m.start() if m else None


def compares(names):
    """One regex for a compare with any of the names: == or != on either side, or strcmp."""
    alt = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    lit = rf'"(?:{alt})"'
    return re.compile(rf"(?:==|!=)\s*(?:std::string(?:_view)?\s*\(\s*)?{lit}|{lit}\s*\)?\s*(?:==|!=)|strcmp\s*\([^;]*{lit}")


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    root = pathlib.Path(argv[1]).resolve()
    extra = [pathlib.Path(p).resolve() for p in argv[argv.index("--also") + 1:]] if "--also" in argv else []
    names = scheme_names(root)
    missing = ISSUE_NAMES - names
    if missing:
        print(f"no_scheme_switch: the scheme definitions did not give the names {sorted(missing)} (found {sorted(names)})")
        return 1
    pattern = compares(names)
    files = [p for d in SCANNED for p in sorted((root / d).rglob("*")) if p.is_file() and p.suffix in SOURCE_SUFFIXES]
    problems, used = [], set()
    for path in files + extra:
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        if rel == REGISTRY and path not in extra:
            continue
        start = scheme_section_start(text) if rel.startswith("src/parallel/") and path not in extra else None
        offset = 0
        for number, line in enumerate(text.splitlines(keepends=True), 1):
            at, offset = offset, offset + len(line)
            if start is not None and at >= start:
                break  # the scheme's own definition: its names are its fields
            if re.search(r"\bCpComm\b", line):
                problems.append(f"{rel}:{number}: the enum CpComm is gone; ask the CpScheme: {line.strip()}")
            if not pattern.search(line):
                continue
            excuse = next((i for i, (p, t, _) in enumerate(ALLOWED) if p == rel and t in line), None)
            if excuse is not None:
                used.add(excuse)
                continue
            problems.append(f"{rel}:{number}: a scheme's name compared as a string; ask the scheme's fields instead: "
                            f"{line.strip()}")
    for i, (p, t, why) in enumerate(ALLOWED):
        if i not in used:
            problems.append(f"{p}: the allowed compare '{t}' ({why}) is no longer there: remove it from ALLOWED")
    for p in problems:
        print(p)
    if problems:
        print(f"no_scheme_switch: {len(problems)} problem(s)")
        return 1
    print(f"no_scheme_switch: {len(files)} files of {', '.join(SCANNED)}, no CpComm and no compare with "
          f"{len(names)} scheme names ({', '.join(sorted(names))}); {len(ALLOWED)} compares of other things allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
