#!/usr/bin/env python3
"""What stored runs say about a machine's noise, from the step times `pipetwin
run` records (otherData.measured.step_times_s of each trace):

  - the warm-up: each step of a run over its steady steps (the median of its
    5th step on), the median over the runs, step by step;
  - from run to run: each repeat's median counted step against the mean of
    its configuration's repeats (the sd of the log, pooled over the
    configurations run 3 times or more), the spread of a configuration's
    repeats (max / min - 1), and how much consecutive runs share it (the
    correlation of their deviations, by file time).

    python3 scripts/noise_of_runs.py out/runs [more folders...]

A folder holds repeats named NAME_rN.json (scripts/demo.sh's out/runs,
python -m bench fidelity's out/fidelity/runs). docs/calibration.md ("Noise") quotes it.
"""
import glob
import json
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_step import counted  # noqa: E402  (the warm-up each run recorded)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plots"))
from stats import median  # noqa: E402


def runs_of(folder: str) -> list[tuple[float, str, dict]]:
    """(file time, configuration, otherData.measured) of every repeat, by time."""
    out = []
    for path in glob.glob(os.path.join(folder, "*_r[0-9]*.json")):
        if path.endswith(".summary.json"):
            continue
        name = re.sub(r"_r\d+\.json$", "", os.path.basename(path))
        try:
            with open(path, encoding="utf-8") as f:
                measured = json.load(f)["otherData"]["measured"]
            steps = measured["step_times_s"]
            if not isinstance(steps, list) or not steps:
                raise ValueError("an empty list")
            counted(measured, steps)
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"{path}: no measured step times: {e!r}")
        out.append((os.path.getmtime(path), name, measured))
    return sorted(out, key=lambda r: (r[0], r[1]))


def correlation(a: list[float], b: list[float]) -> float:
    ma, mb = statistics.mean(a), statistics.mean(b)
    den = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / den if den > 0 else 0.0


def report(folder: str) -> None:
    runs = runs_of(folder)
    long_enough = [m["step_times_s"] for _, _, m in runs if len(m["step_times_s"]) >= 6]
    if not long_enough:
        print(f"{folder}: no run of 6 steps or more")
        return
    ratios: list[list[float]] = []
    for steps in long_enough:
        steady = median(steps[4:])
        for i, t in enumerate(steps):
            if len(ratios) <= i:
                ratios.append([])
            ratios[i].append(t / steady)
    print(f"{folder}: {len(runs)} runs, {len({n for _, n, _ in runs})} configurations")
    print("  warm-up, each step over the run's steady steps (median over runs): "
          + " ".join(f"{median(r):.3f}" for r in ratios[:8]))
    # From run to run: each run by the log of its median counted step (the
    # warm-up it recorded left out); over the configurations run 3 times or
    # more, a run's deviation from its configuration's mean, the sd pooled (n - 1).
    by_name: dict[str, list[float]] = {}
    for _, name, m in runs:
        by_name.setdefault(name, []).append(math.log(median(counted(m, m["step_times_s"]))))
    kept = {n: v for n, v in by_name.items() if len(v) >= 3}
    if not kept:
        print("  from run to run: no configuration run 3 times or more")
        return
    squares = sum((x - statistics.mean(v)) ** 2 for v in kept.values() for x in v)
    freedom = sum(len(v) - 1 for v in kept.values())
    seen: dict[str, int] = {}
    deviation = []
    for _, name, _ in runs:
        if name in kept:
            i = seen.get(name, 0)
            seen[name] = i + 1
            deviation.append(kept[name][i] - statistics.mean(kept[name]))
    spreads = [math.exp(max(v) - min(v)) - 1 for v in kept.values()]
    line = (f"  from run to run: sd of a run's log deviation {100 * math.sqrt(squares / freedom):.1f}%; "
            f"a configuration's repeats spread (max/min - 1) median {100 * median(spreads):.1f}%, "
            f"worst {100 * max(spreads):.1f}% ({len(spreads)} with 3 or more)")
    if len(deviation) > 6:
        line += (f"; consecutive runs' deviations correlate {correlation(deviation[:-1], deviation[1:]):+.2f} "
                 f"(5 apart {correlation(deviation[:-5], deviation[5:]):+.2f})")
    print(line)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for folder in sys.argv[1:]:
        report(folder)
