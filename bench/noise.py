"""A load beside a run: how it moves the step, and what the run records of it.

The measurements behind calibration/noise.hpp's kBusyShare and
kLoadSensitivity.

One configuration (transformer-small, 1f1b, K=2, M=8, batch 16, 9 steps,
1 thread per rank) runs quiet and beside a process that is busy a given
share of every 20 ms on one core (duty 0 = quiet; 1 = a CPU-bound loop),
REPEATS times each, the levels interleaved so that drift hits them alike.
Prints, per run, the median step, the share of the host's CPU that others
took as the run recorded it (with its resolution), and the step's slowdown
against the quiet runs' median; then, per level, the medians, and the
median ratio slowdown / others' share over the loaded runs.

    python -m bench noise [--repeats 3] [--quick]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import ensure_build
from stats import median

HOG = """
import sys, time
duty, end = float(sys.argv[1]), time.time() + float(sys.argv[2])
while time.time() < end:
    t = time.time()
    while time.time() - t < 0.02 * duty:
        pass
    if duty < 1:
        time.sleep(0.02 * (1 - duty))
"""


def run_once(pipetwin: str, duty: float, steps: int) -> dict:
    hog = None
    if duty > 0:
        hog = subprocess.Popen([sys.executable, "-c", HOG, str(duty), "120"])
        time.sleep(0.3)
    try:
        out = subprocess.run([pipetwin, "run", "--model", "examples/transformer-small.yaml", "-s", "1f1b", "-k", "2",
                              "-m", "8", "--batch", "16", "--steps", str(steps), "--threads", "1", "--json"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        if hog:
            hog.kill()
            hog.wait()
    return json.loads(out)["measured"]["noise"]


def add_arguments(p):
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=9)


def run(a) -> dict:
    duties = [0.0, 0.05, 0.1, 0.2, 0.4, 1.0]
    if a.quick:  # one repeat, quiet and fully loaded, of three steps
        a.repeats, a.steps, duties = 1, 3, [0.0, 1.0]
    pipetwin = ensure_build()
    runs: dict[float, list[dict]] = {d: [] for d in duties}
    for rep in range(a.repeats):
        for d in duties:
            n = run_once(pipetwin, d, a.steps)
            runs[d].append(n)
            print(f"repeat {rep + 1} duty {d:4.2f}: step {1e3 * n['step_median_s']:6.1f} ms, others "
                  f"{100 * (n['other_share'] + n['steal_share']):5.1f}% (+-{100 * n['share_resolution']:.1f}%), "
                  f"busy {n['busy']}", flush=True)
    quiet = median(n["step_median_s"] for n in runs[0.0])
    print(f"\nquiet median step {1e3 * quiet:.1f} ms over {a.repeats} runs")
    print("duty  others' share (median)  step (median)  slowdown  busy runs")
    ratios, figures = [], {"quiet_step_s": quiet, "levels": []}
    for d in duties:
        shares = [n["other_share"] + n["steal_share"] for n in runs[d]]
        steps = [n["step_median_s"] for n in runs[d]]
        slow = median(steps) / quiet - 1
        busy = sum(n["busy"] for n in runs[d])
        print(f"{d:4.2f}  {100 * median(shares):21.1f}%  {1e3 * median(steps):10.1f} ms  "
              f"{100 * slow:+7.1f}%  {busy}/{len(runs[d])}")
        figures["levels"].append({"duty": d, "others_share": median(shares), "step_s": median(steps),
                                  "slowdown": slow, "busy_runs": busy, "runs": len(runs[d])})
        if d > 0:
            ratios += [(s / quiet - 1) / sh for s, sh in zip(steps, shares) if sh > 0]
    if ratios:
        print(f"\nslowdown / others' share over the loaded runs: median {median(ratios):.2f} "
              f"(from {min(ratios):.2f} to {max(ratios):.2f}, {len(ratios)} runs)")
        figures["slowdown_per_share"] = median(ratios)
    return figures
