#!/usr/bin/env python3
"""The include graph of pipetwin's C++ folders, and the check that no arrow points up.

    python3 scripts/include_graph.py [ROOT]           # the folders' arrows, with counts
    python3 scripts/include_graph.py --dot [ROOT]     # the same as Graphviz DOT
    python3 scripts/include_graph.py --check [ROOT]   # exit 1 naming each include against the layers

The layers, bottom up (DESIGN.md's dependency direction):

    cli  python  parse (options, or Python's arguments), call twin/, print or return
     |
    twin         the library: scenario, engine choice, sweep, plan, calibration's loop
     |
    sim  exec  calibration     (sim and exec never include each other)
     |
    models
     |
    schedule     the IR: depends on nothing of ours

A file may include its own folder and the layers below its own. Two
exceptions, both named: calibration/ may not include sim/ or exec/ either
(it fits traces, it does not run them), and in cli/ only the executor's entry
(cli/exec_*.cpp, the `pipetwin-exec` binary) may include exec/ and
calibration/; the rest of cli/ includes only twin/, models/ and schedule/.
Standard library only.
"""
import os
import re
import sys
from collections import Counter

LAYERS = {"schedule": 0, "models": 1, "sim": 2, "exec": 2, "calibration": 2, "twin": 3, "cli": 4, "python": 4}
# Folders of the same layer that must not include each other, and others' extra refusals.
FORBIDDEN = {("python", "exec"), ("cli", "python"), ("python", "cli"), ("sim", "exec"), ("exec", "sim"), ("calibration", "sim"), ("calibration", "exec"),
             ("sim", "calibration"), ("exec", "calibration")}
CLI_EXEC_ENTRY = re.compile(r"^cli/exec_[a-z_]+\.cpp$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"')
SOURCES = (".cpp", ".hpp", ".h", ".cc")


def includes(root):
    """Yields (file, line number, from folder, to folder) for every project include."""
    for folder in LAYERS:
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in LAYERS:
                            yield rel, number, folder, m.group(1)


def violation(rel, source, target):
    """Why `rel` (in folder `source`) may not include `target`, or None."""
    if source == target:
        return None
    if source == "cli" and target in ("exec", "calibration", "sim"):
        if target != "sim" and CLI_EXEC_ENTRY.match(rel):
            return None
        return f"cli/ includes only twin/, models/ and schedule/ (the executor's entry, cli/exec_*.cpp, may include exec/ and calibration/)"
    if (source, target) in FORBIDDEN:
        return f"{source}/ never includes {target}/"
    if LAYERS[target] >= LAYERS[source]:
        return f"an arrow pointing up: {source}/ (layer {LAYERS[source]}) includes {target}/ (layer {LAYERS[target]})"
    return None


def main(argv):
    mode = "text"
    args = [a for a in argv if not a.startswith("--")]
    for a in argv:
        if a in ("--dot", "--check"):
            mode = a[2:]
        elif a.startswith("--"):
            print(f"include_graph.py: unknown option {a} (valid: --dot, --check)", file=sys.stderr)
            return 2
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    edges = Counter()
    problems = []
    for rel, number, source, target in includes(root):
        if source != target:
            edges[(source, target)] += 1
        why = violation(rel, source, target)
        if why:
            problems.append(f"{rel}:{number}: includes {target}/: {why}")
    if not edges:
        print(f"include_graph.py: no includes found under {root}", file=sys.stderr)
        return 1
    if mode == "dot":
        print("digraph pipetwin {\n  rankdir=BT;\n  node [shape=box];")
        for (s, t), n in sorted(edges.items()):
            print(f'  "{s}" -> "{t}" [label="{n}"];')
        print("}")
    elif mode == "text":
        for (s, t), n in sorted(edges.items(), key=lambda e: (-LAYERS[e[0][0]], e[0][0], LAYERS[e[0][1]], e[0][1])):
            print(f"{s:12s} -> {t:12s} {n:4d} includes")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        print(f"include_graph.py: {len(problems)} include(s) against the layers", file=sys.stderr)
        return 1
    if mode == "check":
        print(f"include_graph.py: {sum(edges.values())} includes across {len(edges)} arrows between folders, none pointing up")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
