"""The held-out benchmarks' shared steps (fidelity, cross_model, schedules):
configurations run repeat by repeat into a runs folder (a run already there
is reused), those whose repeats spread too far, a prediction of a measured
run on the partition it used, and the compare of the two.
"""
import os
import subprocess

import trace_partition
from bench.common import BenchError, traced_run
from stats import spread
from trace_step import step_of
from wide_repeats import runs_of, wide  # noqa: F401  (wide: the benchmarks' rounds)


def run_rounds(pipetwin: str, runs: str, configs: list, reps, label: str = "run", priority: bool = True) -> None:
    """Repeat by repeat, every configuration once in each: a slow spell of the
    machine then lands on one repeat of several configurations, not on all of
    one's. CONFIGS are (name, run arguments) pairs."""
    total, n = len(configs) * len(reps), 0
    for rep in reps:
        for name, args in configs:
            n += 1
            traced_run(pipetwin, os.path.join(runs, f"{name}_r{rep}.json"),
                       f"[{n:3d}/{total}] {label} {name:<26} repeat {rep}", args, priority)


def noisy(runs: str, names: list, limit_percent: float) -> list:
    """The NAMES whose repeats' steps spread by more than LIMIT_PERCENT of their median."""
    return [n for n in names if 100 * spread([step_of(f) for f in runs_of(runs, n)]) > limit_percent]


def write_partition(trace: str, path: str) -> str:
    """The partition TRACE's run used, as `simulate --partition` reads it, written to PATH."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(trace_partition.main(trace) + "\n")
    return path


def to_file(cmd: list, path: str, errors: str | None = None) -> None:
    """Runs CMD with its stdout in PATH (its stderr in ERRORS where given);
    raises BenchError with the stderr's tail when it fails."""
    with open(path, "w", encoding="utf-8") as out:
        err = open(errors, "w", encoding="utf-8") if errors else subprocess.PIPE
        try:
            done = subprocess.run(cmd, stdout=out, stderr=err, text=True)
        finally:
            if errors:
                err.close()
    if done.returncode != 0:
        text = open(errors, encoding="utf-8").read() if errors else done.stderr
        raise BenchError(f"{' '.join(cmd[:2])} ... failed: {text.strip()[-500:]}")
