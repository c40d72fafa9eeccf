"""Which configurations' measured step is not yet known well enough: for
each NAME, its runs RUNS/NAME_r1.json, NAME_r2.json, ... (those `pipetwin run`
judged quiet, or all where none was), the 95% half-width of their median step
(Student's t over the runs, as `pipetwin compare --repeats` gives it), and
the NAMEs whose half-width exceeds PRECISION (relative), or that have fewer
than five such runs, are printed, one a line, while they have fewer than MAX
runs. Below five the interval is not read: of three runs the median
absolute deviation is the nearer neighbour's distance to the median, so two
runs alike make it small whatever the third (the cross-model bench's runs of
2026-11-30: 382.7, 424.2 and 425.7 ms, +-1.7%).

    python3 scripts/wide_repeats.py RUNS PRECISION MAX NAME...

scripts/demo.sh runs those twice more, round after round, so that each
configuration's median (the calibration's runs and the held-out comparisons')
is known to PRECISION where MAX runs allow it.
"""
import glob
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "plots"))
from stats import median_half_width  # noqa: E402
from trace_step import step_of  # noqa: E402

FEWEST = 5  # runs below which a median is not called known, however narrow its interval reads


def runs_of(runs, name):
    """NAME's repeats in RUNS, in their order (r1, r2, ...)."""
    found = glob.glob(os.path.join(runs, f"{glob.escape(name)}_r*.json"))
    numbered = []
    for path in found:
        tail = os.path.basename(path)[len(name) + 2:-len(".json")]
        if tail.isdigit():
            numbered.append((int(tail), path))
    return [path for _, path in sorted(numbered)]


def busy(path):
    """What `pipetwin run` judged of the machine while the run at PATH ran.
    Raises ValueError naming PATH when it is not such a run's trace."""
    try:
        with open(path, encoding="utf-8") as f:
            judged = json.load(f)["otherData"]["measured"]["noise"]["busy"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: no otherData.measured.noise.busy of a `pipetwin run` trace ({e!r})") from None
    if not isinstance(judged, bool):
        raise ValueError(f"{path}: otherData.measured.noise.busy is {judged!r}, not true or false")
    return judged


def wide(runs, names, precision, most):
    """The NAMES whose median is not yet known to PRECISION, while they have
    fewer than MOST runs. Raises ValueError for a name without runs or a run
    that is not a `pipetwin run` trace."""
    out = []
    for name in names:
        files = runs_of(runs, name)
        if not files:
            raise ValueError(f"no runs of {name} in {runs}")
        quiet = [f for f in files if not busy(f)] or files
        if len(files) < most and (len(quiet) < FEWEST or median_half_width([step_of(f) for f in quiet]) > precision):
            out.append(name)
    return out


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    try:
        for name in wide(argv[0], argv[3:], float(argv[1]), int(argv[2])):
            print(name)
    except ValueError as e:
        sys.exit(f"wide_repeats.py: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
