"""For each NAME of a runs folder (RUNS/NAME_r1.json, NAME_r2.json, ...):
copies the median of its repeats measured on a quiet machine (all where none
was; `pipetwin run`'s own judgement, wide_repeats.busy) to NAME.json, with
its .summary.json and .txt, and lists every quiet repeat in NAME.quiet (the
calibration's) and those other than the median one in NAME.repeats
(`compare --repeats`). Of an even count, the faster of the two middle ones.

    python3 scripts/quiet_median.py RUNS NAME...        (scripts/demo.sh)
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_step import step_of  # noqa: E402
from wide_repeats import busy, runs_of  # noqa: E402


def quiet_median(runs: str, name: str) -> None:
    steps = [(step_of(f), f) for f in runs_of(runs, name)]  # in the runs' order
    if not steps:
        raise ValueError(f"no runs of {name} in {runs}")
    quiet = [s for s in steps if not busy(s[1])]
    if not quiet:
        print(f"  {name}: every repeat ran on a busy machine: its comparison will say so; measure again on a quiet one")
        quiet = steps
    elif len(quiet) < len(steps):
        print(f"  {name}: {len(steps) - len(quiet)} of {len(steps)} repeats ran on a busy machine, left out")
    median = sorted(quiet, key=lambda s: s[0])[(len(quiet) - 1) // 2][1]
    for ext in (".json", ".summary.json", ".txt"):
        shutil.copyfile(median[:-len(".json")] + ext, os.path.join(runs, f"{name}{ext}"))
    with open(os.path.join(runs, f"{name}.quiet"), "w", encoding="utf-8") as f:
        f.writelines(f"{q}\n" for _, q in quiet)
    with open(os.path.join(runs, f"{name}.repeats"), "w", encoding="utf-8") as f:
        f.writelines(f"{q}\n" for _, q in quiet if q != median)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: quiet_median.py RUNS NAME...")
    try:
        for n in sys.argv[2:]:
            quiet_median(sys.argv[1], n)
    except (OSError, ValueError) as e:
        sys.exit(f"quiet_median.py: {e}")
