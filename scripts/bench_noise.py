"""How a load beside a run moves its step, and what the run records of it:
the measurements behind calibration/noise.hpp's kBusyShare and
kLoadSensitivity.

One configuration (transformer-small, 1f1b, K=2, M=8, batch 16, 9 steps,
1 thread per rank) runs quiet and beside a process that is busy a given
share of every 20 ms on one core (duty 0 = quiet; 1 = a CPU-bound loop),
REPEATS times each, the levels interleaved so that drift hits them alike.
Prints, per run, the median step, the share of the host's CPU that others
took as the run recorded it (with its resolution), and the step's slowdown
against the quiet runs' median; then, per level, the medians, and the
median ratio slowdown / others' share over the loaded runs.

    python3 scripts/bench_noise.py [--repeats 3] [--pipetwin build/cli/pipetwin]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

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


def run_once(pipetwin: str, duty: float) -> dict:
    hog = None
    if duty > 0:
        hog = subprocess.Popen([sys.executable, "-c", HOG, str(duty), "120"])
        time.sleep(0.3)
    try:
        out = subprocess.run([pipetwin, "run", "--model", "examples/transformer-small.yaml", "-s", "1f1b", "-k", "2",
                              "-m", "8", "--batch", "16", "--steps", "9", "--threads", "1", "--json"],
                             check=True, capture_output=True, text=True).stdout
    finally:
        if hog:
            hog.kill()
            hog.wait()
    return json.loads(out)["measured"]["noise"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pipetwin", default=os.environ.get("PIPETWIN_BINARY", "build/cli/pipetwin"))
    a = p.parse_args()
    duties = [0.0, 0.05, 0.1, 0.2, 0.4, 1.0]
    runs: dict[float, list[dict]] = {d: [] for d in duties}
    for rep in range(a.repeats):
        for d in duties:
            n = run_once(a.pipetwin, d)
            runs[d].append(n)
            print(f"repeat {rep + 1} duty {d:4.2f}: step {1e3 * n['step_median_s']:6.1f} ms, others "
                  f"{100 * (n['other_share'] + n['steal_share']):5.1f}% (+-{100 * n['share_resolution']:.1f}%), "
                  f"busy {n['busy']}", flush=True)
    quiet = statistics.median(n["step_median_s"] for n in runs[0.0])
    print(f"\nquiet median step {1e3 * quiet:.1f} ms over {a.repeats} runs")
    print("duty  others' share (median)  step (median)  slowdown  busy runs")
    ratios = []
    for d in duties:
        shares = [n["other_share"] + n["steal_share"] for n in runs[d]]
        steps = [n["step_median_s"] for n in runs[d]]
        slow = statistics.median(steps) / quiet - 1
        busy = sum(n["busy"] for n in runs[d])
        print(f"{d:4.2f}  {100 * statistics.median(shares):21.1f}%  {1e3 * statistics.median(steps):10.1f} ms  "
              f"{100 * slow:+7.1f}%  {busy}/{len(runs[d])}")
        if d > 0:
            ratios += [(s / quiet - 1) / sh for s, sh in zip(steps, shares) if sh > 0]
    if ratios:
        print(f"\nslowdown / others' share over the loaded runs: median {statistics.median(ratios):.2f} "
              f"(from {min(ratios):.2f} to {max(ratios):.2f}, {len(ratios)} runs)")


if __name__ == "__main__":
    main()
