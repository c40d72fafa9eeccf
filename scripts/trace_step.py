"""One step of a measured trace as the simulator replays one: from the first
action of rank 0 (stage 0) to the last end, in seconds. `pipetwin run`'s
makespan also holds the other ranks' wait, at the step's start, for the
previous step to leave stage 0 (consecutive steps overlap).

    import trace_step; trace_step.step_of("run.json")   (with scripts/ on sys.path)
    python3 scripts/trace_step.py TRACE.json...          (prints each one's step)
"""
import json
import sys


def first_counted(measured: dict, steps: int) -> int:
    """Where a run's counted steps begin: measured.noise.first_counted_step
    (its warm-up left out), or 1 in traces from before that record (0 for a
    run of one step), as calibrate reads it (calibration::recorded_bubble).
    Raises ValueError for a value that is not a step of the run."""
    noise = measured.get("noise") if isinstance(measured, dict) else None
    if not isinstance(noise, dict) or "first_counted_step" not in noise:
        return 1 if steps > 1 else 0
    first = noise["first_counted_step"]
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first < steps:
        raise ValueError(f"otherData.measured.noise.first_counted_step is {first!r}, outside the {steps} steps")
    return first


def counted(measured: dict, every: list) -> list:
    """The steps of a run's `every` (step_times_s or bubble_fractions) it
    counted: its warm-up left out (first_counted); none of none (a run that
    did not record that list)."""
    return every[first_counted(measured, len(every)):] if every else every


def step_of(path: str) -> float:
    """Raises ValueError naming `path` when it is not such a trace."""
    try:
        with open(path, encoding="utf-8") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        t0 = min(e["ts"] for e in events if e["pid"] == 0)
        return (max(e["ts"] + e["dur"] for e in events) - t0) / 1e6
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: no step to time (complete events with rank 0's among them): {e!r}") from None


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: trace_step.py TRACE.json...")
    try:
        for p in sys.argv[1:]:
            print(f"{p} {step_of(p):.6f}")
    except ValueError as e:
        sys.exit(str(e))
