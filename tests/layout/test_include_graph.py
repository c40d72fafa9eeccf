#!/usr/bin/env python3
"""scripts/include_graph.py: the repository's folders keep their layers, and
the check refuses each kind of include against them, naming the file and line.

    python3 tests/layout/test_include_graph.py REPOSITORY_ROOT
"""
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "include_graph.py")
failures = []


def check(root):
    return subprocess.run([sys.executable, "-B", SCRIPT, "--check", root], capture_output=True, text=True)


def expect(condition, what):
    if not condition:
        failures.append(what)


# The repository itself: no arrow up, and the arrows the layers are made of are there.
r = check(ROOT)
expect(r.returncode == 0, f"the repository breaks its layers:\n{r.stderr}")
expect("none pointing up" in r.stdout, f"no summary line: {r.stdout!r}")
graph = subprocess.run([sys.executable, "-B", SCRIPT, ROOT], capture_output=True, text=True).stdout
for arrow in ("cli          -> twin", "twin         -> sim", "models       -> schedule"):
    expect(arrow in graph, f"the graph lacks '{arrow}':\n{graph}")
expect("cli          -> sim" not in graph, f"cli/ includes sim/:\n{graph}")

# A tree of one file per case: each include against the layers is refused by name.
cases = {
    "schedule/a.hpp": ('#include "models/b.hpp"', "an arrow pointing up"),
    "sim/a.cpp": ('#include "exec/b.hpp"', "sim/ never includes exec/"),
    "calibration/a.cpp": ('#include "sim/b.hpp"', "calibration/ never includes sim/"),
    "cli/cmd_x.cpp": ('#include "calibration/b.hpp"', "cli/ includes only"),
    "twin/a.cpp": ('#include "cli/b.hpp"', "an arrow pointing up"),
}
for path, (line, why) in cases.items():
    with tempfile.TemporaryDirectory() as tree:
        os.makedirs(os.path.join(tree, os.path.dirname(path)))
        os.makedirs(os.path.join(tree, "models"), exist_ok=True)
        with open(os.path.join(tree, "models", "ok.hpp"), "w") as f:
            f.write('#include "schedule/ok.hpp"\n')
        with open(os.path.join(tree, path), "w") as f:
            f.write("// a case\n" + line + "\n")
        r = check(tree)
        expect(r.returncode == 1, f"{path}: '{line}' was not refused (exit {r.returncode})")
        expect(f"{path}:2:" in r.stderr and why in r.stderr, f"{path}: the refusal does not say '{path}:2: ... {why}': {r.stderr!r}")

# The executor's entry may include exec/ and calibration/.
with tempfile.TemporaryDirectory() as tree:
    os.makedirs(os.path.join(tree, "cli"))
    with open(os.path.join(tree, "cli", "exec_run.cpp"), "w") as f:
        f.write('#include "exec/run.hpp"\n#include "calibration/noise.hpp"\n')
    r = check(tree)
    expect(r.returncode == 0, f"cli/exec_run.cpp refused: {r.stderr!r}")

for f in failures:
    print("FAIL:", f)
print(f"include graph: {len(cases) + 2} cases, {len(failures)} failed")
sys.exit(1 if failures else 0)
