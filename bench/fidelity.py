"""Fidelity of the calibrated simulator on this machine's CPU, held out.

Runs examples/transformer-small.yaml for real (pipetwin run, one thread per
rank, batch 16) over K in {1,2,4} x M in {1,2,4,8,16} x {gpipe,1f1b} x
recompute {none,full}; calibrates on the runs with M in {1,4,16}; predicts
the held-out ones (M in {2,8}) with `simulate --hardware CALIBRATED.yaml` on
the partition each run used (SimGrid where ranks share cores); prints, per
held-out configuration, predicted against measured step time, bubble
fraction and peak stashed bytes per stage, then medians and worst cases;
then the tensor- and data-parallel section (bench/fidelity_parallel.py).

    python -m bench fidelity              (about 9 minutes on 2 idle cores)
    python -m bench fidelity --quick      (K in {1,2}, M in {1,2}, gpipe: a minute)

Options (each also read from its environment variable as before): --out
(FIDELITY_OUT, default out/fidelity; runs already there are reused, so a
second call only recalibrates and predicts), --repeats (FIDELITY_REPEATS:
runs per configuration, the median one by step time is used; default 3),
--extra and --spread (FIDELITY_EXTRA, FIDELITY_SPREAD; default 3 and 10: a
configuration whose repeats' steps spread by more than 10% of their median
gets 3 more, the median of all then used), --steps (FIDELITY_STEPS, default
12: the trace is the median step, the first left out), --microbench
(FIDELITY_MICROBENCH=1: also calibrate --microbench), --calibrate-repeat
(FIDELITY_CALIBRATE_REPEAT: fastest, median, slowest or all: which repeat of
each calibration configuration the fit reads; default median; the held-out
ones are always measured by their median repeat), --no-parallel
(FIDELITY_PARALLEL=0), --parallel-repeats (FIDELITY_PARALLEL_REPEATS),
--no-priority (FIDELITY_PRIORITY=0).

A step is timed (scripts/trace_step.py) from the first action of rank 0 (stage
0) to the last end, as the simulator replays one. A held-out configuration's
measured bubble is the median of the steps of all its repeats; a calibration
run's is the median of its own steps, as calibrate reads it. Timings on a
shared machine are disturbed by whatever else runs: the load average is
printed before and after, and the runs go in a session of their own at high
priority where this user may raise priorities (root).
"""
import os

from bench import fidelity_parallel, fidelity_report
from bench.common import ROOT, ensure_build, loadavg
from bench.runs import noisy, run_rounds, to_file, write_partition
from median_repeat import median_repeats
from trace_step import step_of
from wide_repeats import runs_of

MODEL = "examples/transformer-small.yaml"
BATCH = 16
CALIBRATE_M = (1, 4, 16)


def env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def add_arguments(p):
    p.add_argument("--out", default=env("FIDELITY_OUT", "out/fidelity"))
    p.add_argument("--repeats", type=int, default=int(env("FIDELITY_REPEATS", "3")))
    p.add_argument("--extra", type=int, default=int(env("FIDELITY_EXTRA", "3")))
    p.add_argument("--spread", type=float, default=float(env("FIDELITY_SPREAD", "10")))
    p.add_argument("--steps", type=int, default=int(env("FIDELITY_STEPS", "12")))
    p.add_argument("--microbench", action="store_true", default=bool(env("FIDELITY_MICROBENCH", "")))
    p.add_argument("--calibrate-repeat", choices=("fastest", "median", "slowest", "all"),
                   default=env("FIDELITY_CALIBRATE_REPEAT", "median"))
    p.add_argument("--no-parallel", action="store_true", default=env("FIDELITY_PARALLEL", "1") == "0")
    p.add_argument("--parallel-repeats", type=int, default=int(env("FIDELITY_PARALLEL_REPEATS", "0")) or None)
    p.add_argument("--no-priority", action="store_true", default=env("FIDELITY_PRIORITY", "1") == "0")


def configurations(quick: bool) -> list:
    """(S, K, M, R) of every configuration, in the runs' order."""
    ks, ms, ss, rs = ((1, 2), (1, 2), ("gpipe",), ("none",)) if quick else \
        ((1, 2, 4), (1, 2, 4, 8, 16), ("gpipe", "1f1b"), ("none", "full"))
    return [(s, k, m, r) for k in ks for m in ms for s in ss for r in rs]


def name_of(c: tuple) -> str:
    s, k, m, r = c
    return f"{s}_k{k}_m{m}_{r}"


def calibration_repeats(runs: str, name: str, pick: str) -> list:
    """The runs of a calibration configuration the fit reads."""
    if pick == "median":
        return [os.path.join(runs, f"{name}.json")]
    steps = sorted((step_of(p), p) for p in runs_of(runs, name))
    return [p for _, p in steps] if pick == "all" else [steps[0][1] if pick == "fastest" else steps[-1][1]]


def measure(pipetwin: str, a, configs: list, calibrate_m: tuple) -> tuple:
    """Runs every configuration, the noisy ones again; returns the calibration
    traces and the held-out names."""
    runs = os.path.join(a.out, "runs")
    pairs = [(name_of(c), ["--model", MODEL, "-s", c[0], "-k", str(c[1]), "-m", str(c[2]), "--batch", str(BATCH),
                           "--recompute", c[3], "--steps", str(a.steps), "--threads", "1"]) for c in configs]
    run_rounds(pipetwin, runs, pairs, range(1, a.repeats + 1), priority=not a.no_priority)
    # The slow spells of this machine last about a minute, and now and then
    # land on two repeats of one configuration: those get --extra more.
    spread = noisy(runs, [n for n, _ in pairs], a.spread)
    if spread and a.extra > 0:
        print(f"{len(spread)} configuration(s) whose repeats spread by more than {a.spread:g}%: {a.extra} more repeats each")
        run_rounds(pipetwin, runs, [p for p in pairs if p[0] in spread], range(a.repeats + 1, a.repeats + a.extra + 1),
                   priority=not a.no_priority)
    median_repeats(runs)
    calibrate, held = [], []
    for c in configs:
        if c[2] in calibrate_m:
            calibrate += calibration_repeats(runs, name_of(c), a.calibrate_repeat)
        else:
            held.append(name_of(c))
    return calibrate, held


def predict(pipetwin: str, a, configs: list, calibrate: list, held: list) -> None:
    print(f"calibrate on {len(calibrate)} runs, predict {len(held)} held out")
    cmd = [pipetwin, "calibrate"] + calibrate + (["--microbench"] if a.microbench else []) + \
        ["--hardware", "cpu", "--out", os.path.join(a.out, "calibrated.yaml")]
    to_file(cmd, os.path.join(a.out, "calibrate.txt"))
    lines = open(os.path.join(a.out, "calibrate.txt"), encoding="utf-8").read().splitlines()
    shown = False
    for line in lines:
        if line.startswith("residuals"):
            shown = True
        elif line.startswith("steps"):
            shown = False
        if shown:
            print(line)
    by_name = {name_of(c): c for c in configs}
    for name in held:
        s, k, m, r = by_name[name]
        pred = os.path.join(a.out, "predicted", name)
        part = write_partition(os.path.join(a.out, "runs", f"{name}.json"), pred + ".partition")
        to_file([pipetwin, "simulate", "--model", MODEL, "--hardware", os.path.join(a.out, "calibrated.yaml"), "-s", s,
                 "-k", str(k), "-m", str(m), "--batch", str(BATCH), "--recompute", r, "--partition", part,
                 "--trace", pred + ".json", "--json"], pred + ".summary.json")


def run(a) -> dict:
    if a.quick:
        a.repeats, a.extra, a.steps = 1, 0, 3
        if a.out == "out/fidelity":
            a.out = "out/fidelity-quick"
    pipetwin = ensure_build()
    a.out = os.path.join(ROOT, a.out)
    for sub in ("runs", "predicted"):
        os.makedirs(os.path.join(a.out, sub), exist_ok=True)
    print(f"load before: {loadavg()} on {os.cpu_count()} cores")
    configs = configurations(a.quick)
    calibrate, held = measure(pipetwin, a, configs, (1,) if a.quick else CALIBRATE_M)
    predict(pipetwin, a, configs, calibrate, held)
    print(f"load after: {loadavg()}")
    figures = fidelity_report.report(a.out, held, (1, 2) if a.quick else (1, 2, 4))
    if not a.no_parallel:
        figures["parallel"] = fidelity_parallel.section(pipetwin, a, calibrate, MODEL, BATCH)
    return figures

