"""For every configuration of a runs folder (NAME_r1.json, NAME_r2.json, ...),
copies its median repeat by step time (scripts/trace_step.py's step_of; of an
even count, the faster of the two middle ones) to NAME.json.

    python3 scripts/median_repeat.py OUT/runs
"""
import glob
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_step import step_of  # noqa: E402


def median_repeats(runs: str) -> None:
    for f in sorted(os.listdir(runs)):
        if not f.endswith("_r1.json"):
            continue
        name = f[: -len("_r1.json")]
        paths = [p for p in glob.glob(os.path.join(runs, f"{name}_r*.json"))
                 if re.fullmatch(re.escape(name) + r"_r[0-9]+\.json", os.path.basename(p))]
        reps = sorted((step_of(p), p) for p in paths)
        shutil.copyfile(reps[(len(reps) - 1) // 2][1], os.path.join(runs, f"{name}.json"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: median_repeat.py RUNS_DIR")
    try:
        median_repeats(sys.argv[1])
    except (OSError, ValueError) as e:
        sys.exit(f"median_repeat.py: {e}")
