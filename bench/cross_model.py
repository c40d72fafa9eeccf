"""Fidelity across models: calibrate on one model, predict others held out.

The case "before buying hardware": the user can measure one device, or one
model's pipeline, not the pipeline they plan. Two calibrations, each used to
predict models it never saw:

  A  pipetwin calibrate on transformer-small's own pipeline runs
     (K in {1,2,4} x M in {1,4,16} x {gpipe,1f1b}, recompute none);
  B  pipetwin calibrate --microbench --model TARGET alone: the target
     model's short one- and two-rank runs, no pipeline run of it at all; one
     pass of them in each of the first repeats and in each later round that
     runs the model again, beside the held-out runs, fitted all together.

Held out: examples/mlp-small.yaml, resnet-small, transformer-wide and
llama-small, each run for real over K in {1,2,4} x M in {2,8} x
{gpipe,1f1b} (batch 16, one thread per rank), predicted by `simulate
--hardware CALIBRATED.yaml` on the partition each run used. Prints per
configuration the measured and predicted step times under A and B, the
measurement's noise and compare's verdicts, then per model and overall the
median and worst errors (aim: median <= 7%, worst <= 15%), and what a model
without error would read with that noise.

    python -m bench cross_model           (45 to 75 minutes on 2 cores)
    python -m bench cross_model --quick   (mlp-small, K in {1,2}, gpipe; a few minutes)

Options (each also read from its environment variable as before): --out
(CROSS_OUT, default out/cross-model; runs already there are reused),
--repeats (CROSS_REPEATS, default 3), --precision and --max-repeats
(CROSS_PRECISION, CROSS_MAX_REPEATS; defaults 0.10 and 9: two more runs at
a time of each configuration whose median is not known to +-PRECISION, up to
MAX_REPEATS runs), --steps (CROSS_STEPS, default 12), --models (CROSS_MODELS),
--no-microbench (CROSS_MICROBENCH=0: calibration B left out), --no-priority
(CROSS_PRIORITY=0).
"""
import glob
import os
import filecmp

from bench.common import ROOT, ensure_build, loadavg, prio
from bench.cross_model_report import report
from bench.runs import run_rounds, to_file, wide, write_partition
from median_repeat import median_repeats
from wide_repeats import runs_of

BATCH = 16
MODELS = "mlp-small resnet-small transformer-wide llama-small"


def env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def add_arguments(p):
    p.add_argument("--out", default=env("CROSS_OUT", "out/cross-model"))
    p.add_argument("--repeats", type=int, default=int(env("CROSS_REPEATS", "3")))
    p.add_argument("--precision", type=float, default=float(env("CROSS_PRECISION", "0.10")))
    p.add_argument("--max-repeats", type=int, default=int(env("CROSS_MAX_REPEATS", "9")))
    p.add_argument("--steps", type=int, default=int(env("CROSS_STEPS", "12")))
    p.add_argument("--models", default=env("CROSS_MODELS", MODELS), help="held-out models (space-separated)")
    p.add_argument("--no-microbench", action="store_true", default=env("CROSS_MICROBENCH", "1") == "0")
    p.add_argument("--no-priority", action="store_true", default=env("CROSS_PRIORITY", "1") == "0")


def configurations(a) -> tuple:
    """(model, S, K, M) of every configuration, and the held-out names."""
    ks, cal_ms, held_ms, ss = ((1, 2), (1,), (2,), ("gpipe",)) if a.quick else \
        ((1, 2, 4), (1, 4, 16), (2, 8), ("gpipe", "1f1b"))
    configs = [("transformer-small", s, k, m) for k in ks for m in cal_ms for s in ss]
    held = []
    for model in a.models.split():
        for k in ks:
            for m in held_ms:
                for s in ss:
                    configs.append((model, s, k, m))
                    held.append(name_of(configs[-1]))
    return configs, held


def name_of(c: tuple) -> str:
    return f"{c[0]}_{c[1]}_k{c[2]}_m{c[3]}"


def microbench_pass(pipetwin: str, a, model: str, rep: int) -> None:
    """B's microbenchmarks of one model, one pass of them (reused where already there)."""
    folder = os.path.join(a.out, f"microbench-{model}", f"r{rep}")
    if os.path.exists(folder + ".yaml") and os.path.getsize(folder + ".yaml") > 0:
        return
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    print(f"B: calibrate --microbench --model examples/{model}.yaml (repeat {rep})", flush=True)
    to_file(prio([pipetwin, "calibrate", "--microbench", "--model", f"examples/{model}.yaml", "--threads", "1",
                  "--hardware", "cpu", "--microbench-dir", folder, "--out", folder + ".yaml"], not a.no_priority),
            folder + ".txt")


def measure(pipetwin: str, a, configs: list) -> None:
    """The first repeats, then two more at a time of the configurations whose
    median is not yet known to +-precision, up to max-repeats."""
    runs = os.path.join(a.out, "runs")
    pairs = [(name_of(c), ["--model", f"examples/{c[0]}.yaml", "-s", c[1], "-k", str(c[2]), "-m", str(c[3]),
                           "--batch", str(BATCH), "--steps", str(a.steps), "--threads", "1"]) for c in configs]
    for rep in range(1, a.repeats + 1):
        if not a.no_microbench:
            for model in a.models.split():
                microbench_pass(pipetwin, a, model, rep)
        run_rounds(pipetwin, runs, pairs, [rep], priority=not a.no_priority)
    rep = a.repeats
    while rep + 2 <= a.max_repeats:
        again = wide(runs, [n for n, _ in pairs], a.precision, a.max_repeats)
        if not again:
            break
        print(f"their median not yet known to +-{100 * a.precision:g}%: {len(again)} configuration(s), two more runs each")
        if not a.no_microbench:
            for model in a.models.split():
                if any(w.split("_")[0] == model for w in again):
                    microbench_pass(pipetwin, a, model, rep + 1)
        run_rounds(pipetwin, runs, [p for p in pairs if p[0] in again], [rep + 1, rep + 2], priority=not a.no_priority)
        rep += 2
    median_repeats(runs)


def calibrate(pipetwin: str, a, configs: list) -> None:
    traces = [os.path.join(a.out, "runs", name_of(c) + ".json") for c in configs if c[0] == "transformer-small"]
    print(f"A: calibrate on {len(traces)} runs of transformer-small")
    to_file([pipetwin, "calibrate"] + traces + ["--hardware", "cpu", "--out", f"{a.out}/A.yaml"], f"{a.out}/A.txt")
    if a.no_microbench:
        return
    for model in a.models.split():
        passes = sorted(glob.glob(f"{a.out}/microbench-{model}/r*/"))
        print(f"B: calibrate on {len(passes)} pass(es) of the microbenchmarks of {model}")
        to_file([pipetwin, "calibrate"] + sorted(glob.glob(f"{a.out}/microbench-{model}/r*/*.json")) +
                ["--hardware", "cpu", "--out", f"{a.out}/B-{model}.yaml"], f"{a.out}/B-{model}.txt")


def predict(pipetwin: str, a, configs: list, held: list) -> None:
    by_name = {name_of(c): c for c in configs}
    notes = set()
    for name in held:
        model, s, k, m = by_name[name]
        pred, run = os.path.join(a.out, "predicted", name), os.path.join(a.out, "runs", f"{name}.json")
        part = write_partition(run, pred + ".partition")
        # The other repeats than the median one: the measurement's noise, against which compare judges.
        others = [f for f in runs_of(os.path.join(a.out, "runs"), name) if not filecmp.cmp(f, run, shallow=False)]
        for cal, hw in (("A", f"{a.out}/A.yaml"), ("B", f"{a.out}/B-{model}.yaml")):
            if not os.path.exists(hw) or os.path.getsize(hw) == 0:
                continue
            to_file([pipetwin, "simulate", "--model", f"examples/{model}.yaml", "--hardware", hw, "-s", s, "-k", str(k),
                     "-m", str(m), "--batch", str(BATCH), "--partition", part, "--trace", f"{pred}.{cal}.json", "--json"],
                    f"{pred}.{cal}.summary.json", f"{pred}.{cal}.notes")
            notes.update(open(f"{pred}.{cal}.notes", encoding="utf-8").read().splitlines())
            to_file([pipetwin, "compare", "--json", f"{pred}.{cal}.json", run] + (["--repeats"] + others if others else []),
                    f"{pred}.{cal}.compare.json")
    for line in sorted(notes):
        print(line)


def run(a) -> dict:
    if a.quick:
        a.repeats, a.max_repeats, a.steps, a.models = 1, 1, 3, "mlp-small"
        if a.out == "out/cross-model":
            a.out = "out/cross-model-quick"
    pipetwin = ensure_build()
    a.out = os.path.join(ROOT, a.out)
    for sub in ("runs", "predicted"):
        os.makedirs(os.path.join(a.out, sub), exist_ok=True)
    print(f"load before: {loadavg()} on {os.cpu_count()} cores")
    configs, held = configurations(a)
    measure(pipetwin, a, configs)
    calibrate(pipetwin, a, configs)
    predict(pipetwin, a, configs, held)
    print(f"load after: {loadavg()}")
    return report(a.out, held)
