"""Sweep speed: the fast path against SimGrid, and a million configurations with --engine auto.

Measured side by side in one run on this machine: the same kind of grid
through the fast path (in-process, every core) and through SimGrid (a child
process per configuration), a 1,000-configuration sweep in both, then a
1,008,000-configuration sweep with --engine auto. Prints wall times,
configurations per second, and the rows of the big sweep by status and engine.

    python -m bench sweep [--quick]        (about 10 minutes on 2 cores; --quick: seconds)
"""
import collections
import csv
import os
import subprocess
import tempfile
import time

from bench.common import MODEL, ROOT, ensure_build

COMMON = ["--model", MODEL, "--hardware", "a100", "--ranks", "1,2,3,4,5,6",
          "--schedules", "gpipe,1f1b,interleaved-1f1b,zb-h1,pipedream", "--recompute", "none,full,except-last"]


def seq(n: int) -> str:
    return ",".join(str(i) for i in range(1, n + 1))


def k1000(microbatches: int = 25, sizes: str = "1,2,4,8,16") -> list:
    """4 x 25 x 2 x 5 = 1,000 configurations, every one runnable."""
    return ["--model", MODEL, "--hardware", "a100", "--ranks", "1,2,3,4", "--microbatches", seq(microbatches),
            "--schedules", "gpipe,1f1b", "--microbatch-size", sizes]


def timed_sweep(pipetwin: str, args: list, out: str) -> tuple:
    """The wall seconds of `pipetwin sweep ARGS --out OUT`, and the rows it wrote."""
    t0 = time.perf_counter()
    subprocess.run([pipetwin, "sweep"] + args + ["--out", out], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out, encoding="utf-8") as f:
        return wall, list(csv.DictReader(f))


def add_arguments(p):
    pass


def run(a) -> dict:
    pipetwin = ensure_build()
    # 6 x 16 x 5 x 3 x 3 = 4,320 configurations (quick: 6 x 2 x 5 x 3 x 1 = 180)
    small = ["--microbatches", seq(16 if not a.quick else 2), "--microbatch-size", "1,2,4" if not a.quick else "1"]
    big = ["--microbatches", seq(64 if not a.quick else 4), "--microbatch-size", seq(175 if not a.quick else 5)]
    grid = k1000() if not a.quick else k1000(2, "1")
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        fast, rows = timed_sweep(pipetwin, COMMON + small + ["--engine", "fast"], os.path.join(tmp, "fast.csv"))
        sg, sg_rows = timed_sweep(pipetwin, COMMON + small + ["--engine", "simgrid"], os.path.join(tmp, "simgrid.csv"))
        n = len(rows)
        print(f"{n} configurations: fast path {fast:.2f} s ({n / fast:.0f}/s), SimGrid {sg:.2f} s ({n / sg:.0f}/s), "
              f"ratio {sg / fast:.1f}x")
        figures["small"] = {"configurations": n, "fast_s": fast, "simgrid_s": sg}
        sg1000, r1000 = timed_sweep(pipetwin, grid + ["--engine", "simgrid"], os.path.join(tmp, "sg1000.csv"))
        fast1000, _ = timed_sweep(pipetwin, grid + ["--engine", "fast"], os.path.join(tmp, "fast1000.csv"))
        print(f"{len(r1000)} configurations: SimGrid {sg1000:.2f} s, fast path {fast1000:.2f} s")
        figures["k1000"] = {"configurations": len(r1000), "simgrid_s": sg1000, "fast_s": fast1000}
        auto, big_rows = timed_sweep(pipetwin, COMMON + big, os.path.join(tmp, "big.csv"))
        n = len(big_rows)
        print(f"{n} configurations, --engine auto: {auto:.1f} s ({n / auto:.0f}/s); at the SimGrid rate above it "
              f"would take {n * sg / len(sg_rows):.0f} s")
        counts = collections.Counter(f"{r['status']},{r['engine']}" for r in big_rows)
        for key, count in sorted(counts.items()):
            print(f"  status,engine {count:7d} {key}")
        figures["big"] = {"configurations": n, "auto_s": auto, "by_status_engine": dict(counts)}
    return figures
