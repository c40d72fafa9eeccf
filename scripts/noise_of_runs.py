#!/usr/bin/env python3
"""What stored runs say about a machine's noise, from the step times `pipetwin
run` records (otherData.measured.step_times_s of each trace):

  - the warm-up: each step of a run over its steady steps (the median of its
    5th step on), the median over the runs, step by step;
  - from run to run: each repeat's median step against the median of its
    configuration's repeats (sd of the log ratio), the spread of a
    configuration's repeats (max / min - 1), and how much consecutive runs
    share it (the correlation of their deviations, by file time).

    python3 scripts/noise_of_runs.py out/runs [more folders...]

A folder holds repeats named NAME_rN.json (scripts/demo.sh's out/runs,
scripts/bench_fidelity.sh's runs/). docs/calibration.md ("Noise") quotes it.
"""
import glob
import json
import math
import os
import re
import statistics
import sys


def runs_of(folder: str) -> list[tuple[float, str, list[float]]]:
    out = []
    for path in glob.glob(os.path.join(folder, "*_r[0-9]*.json")):
        if path.endswith(".summary.json"):
            continue
        name = re.sub(r"_r\d+\.json$", "", os.path.basename(path))
        try:
            with open(path, encoding="utf-8") as f:
                steps = json.load(f)["otherData"]["measured"]["step_times_s"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"{path}: no measured step times: {e!r}")
        out.append((os.path.getmtime(path), name, steps))
    return sorted(out)


def correlation(a: list[float], b: list[float]) -> float:
    ma, mb = statistics.mean(a), statistics.mean(b)
    den = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / den if den > 0 else 0.0


def report(folder: str) -> None:
    runs = runs_of(folder)
    long_enough = [s for _, _, s in runs if len(s) >= 6]
    if not long_enough:
        print(f"{folder}: no run of 6 steps or more")
        return
    ratios: list[list[float]] = []
    for steps in long_enough:
        steady = statistics.median(steps[4:])
        for i, t in enumerate(steps):
            if len(ratios) <= i:
                ratios.append([])
            ratios[i].append(t / steady)
    print(f"{folder}: {len(runs)} runs, {len({n for _, n, _ in runs})} configurations")
    print("  warm-up, each step over the run's steady steps (median over runs): "
          + " ".join(f"{statistics.median(r):.3f}" for r in ratios[:8]))
    # From run to run: each run by its median step, warm-up (2 steps) left out.
    by_name: dict[str, list[float]] = {}
    for _, name, steps in runs:
        by_name.setdefault(name, []).append(statistics.median(steps[2:] if len(steps) >= 5 else steps[1:] or steps))
    deviation = [math.log(statistics.median(s[2:] if len(s) >= 5 else s[1:] or s) / statistics.median(by_name[n]))
                 for _, n, s in runs]
    spreads = [max(v) / min(v) - 1 for v in by_name.values() if len(v) >= 3]
    line = f"  from run to run: sd of a run's log deviation {100 * statistics.pstdev(deviation):.1f}%"
    if spreads:
        line += (f"; a configuration's repeats spread (max/min - 1) median {100 * statistics.median(spreads):.1f}%, "
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
