"""PyTorch's own schedules on a model pipetwin does not know: calibrated on two configurations' torch.profiler traces, the others predicted.

The model is a decoder-only stack of torch.nn.TransformerEncoderLayer (a
causal mask), one layer per stage, four stages on two ranks over Gloo
(examples/python/profile_torch_schedules.py). Every configuration (a PyTorch
schedule class and M, one batch of 32 samples) runs --repeats times,
interleaved, each time 2 warm-up and --steps profiled steps, one trace per
rank. `pipetwin calibrate` fits a cost table to every run of the two
configurations --fit names (two micro-batch sizes, so per-sample times), and
each other configuration is predicted on it in its own order of actions.

Each configuration is held against its runs by `pipetwin compare --costs
RUN --repeats OTHERS`: its measured step is the median over its runs of each
run's median step, and the verdict weighs the error against how far the step
moves from run to run (the 95% interval of the runs' median): on this host's
CPUs a run's pace moves by more than the model's error, which the report says
where it is so.
"""
import os
import subprocess
import tempfile

from bench.common import BenchError, ensure_build, run_json, venv_python
from stats import median

CONFIGS = ("interleaved1f1b-m4", "interleaved1f1b-m8", "interleavedzb-m4", "interleavedzb-m8", "loopedbfs-m4",
           "loopedbfs-m8", "zbv-m4", "zbv-m8")
BATCH = 32


def add_arguments(p):
    p.add_argument("--repeats", type=int, default=3, help="runs of each configuration, interleaved")
    p.add_argument("--steps", type=int, default=4, help="profiled steps per run")
    p.add_argument("--fit", default="interleaved1f1b-m4,interleavedzb-m8", help="the two configurations fitted")
    p.add_argument("--runs", metavar="DIR", default=None,
                   help="profile into DIR (kept), or read the runs already there (DIR/<config>-r<i>/rank<R>.json)")


def profile(out, repeats, steps, tiny):
    sizes = ["--width", "32", "--heads", "2", "--ffn", "64", "--seq", "16", "--batch", str(BATCH)] if tiny else []
    script = os.path.join("examples", "python", "profile_torch_schedules.py")
    subprocess.run([venv_python(), script, out, "--repeats", str(repeats), "--steps", str(steps), *sizes], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(a) -> dict:
    if a.quick:
        a.repeats, a.steps = 1, 2
    if a.repeats < 1:
        raise BenchError("--repeats must be at least 1")
    pipetwin = ensure_build()
    fit = [c for c in a.fit.split(",") if c]
    for c in fit:
        if c not in CONFIGS:
            raise BenchError(f"--fit: unknown configuration '{c}' (known: {', '.join(CONFIGS)})")
    held = [c for c in CONFIGS if c not in fit]
    tmp = None
    folder = a.runs
    if folder is None:
        tmp = tempfile.TemporaryDirectory()
        folder = tmp.name
    def name(c, i):
        return f"{c}-r{i}" if a.repeats > 1 else c

    if not os.path.isdir(os.path.join(folder, name(CONFIGS[0], 0))):
        profile(folder, a.repeats, a.steps, a.quick)
    runs = {c: [os.path.join(folder, name(c, i)) for i in range(a.repeats)] for c in CONFIGS}
    for c in CONFIGS:
        for r in runs[c]:
            if not os.path.isdir(r):
                raise BenchError(f"{r}: no such run (--runs names a folder profiled with other --repeats?)")
    costs = os.path.join(folder, "costs.yaml")
    cal = run_json([pipetwin, "calibrate", *[r for c in fit for r in runs[c]], "--batch", str(BATCH), "--out", costs,
                    "--held-out", *[r for c in held for r in runs[c]], "--json"])
    by_path = {r["path"]: r for r in cal["runs"]}
    rows = []
    for c in CONFIGS:
        each = [by_path[r] for r in runs[c]]
        # compare's figures, which its verdict weighs: each run's median step
        # (its timeline), their median over the runs, the prediction in the
        # run's own order on the table.
        report = run_json([pipetwin, "compare", "--costs", costs, "--batch", str(BATCH), runs[c][0], "--json",
                           *(["--repeats", *runs[c][1:]] if len(runs[c]) > 1 else [])])
        predicted = report["step_time_s"]["predicted"]
        measured = report["repeats"]["median_s"] if "repeats" in report else report["step_time_s"]["measured"]
        rows.append({"config": c, "fitted": c in fit, "predicted_s": predicted, "measured_s": measured,
                     "error": predicted / measured - 1, "run_medians_s": [r["measured_median_s"] for r in each],
                     "verdict": report["verdict"]["step_time"], "why": report["verdict"]["why"]})
    print(f"fitted on {', '.join(fit)} ({a.repeats} run(s) each), batch {BATCH}; the table: {costs if a.runs else '(temporary)'}")
    print(f"{'configuration':<22}{'':>9}{'measured':>11}{'predicted':>11}{'error':>9}  verdict")
    for r in rows:
        print(f"{r['config']:<22}{'fitted' if r['fitted'] else 'held out':>9}{1e3 * r['measured_s']:>9.1f}ms"
              f"{1e3 * r['predicted_s']:>9.1f}ms{100 * r['error']:>+8.1f}%  {r['verdict']}")
    out = [abs(r["error"]) for r in rows if not r["fitted"]]
    beyond = [r for r in rows if not r["fitted"] and abs(r["error"]) > 0.10]
    print(f"held out: {len(out)} configurations, |error| median {100 * median(out):.1f}%, worst {100 * max(out):.1f}%; "
          f"{sum(e <= 0.05 for e in out)} within 5%, {sum(e <= 0.10 for e in out)} within 10%")
    for r in beyond:
        print(f"  {r['config']}: beyond 10%: {r['verdict']}: {r['why']}")
    aims = median(out) <= 0.05 and max(out) <= 0.10
    noisy = [r for r in rows if not r["fitted"] and r["verdict"] == "within noise"]
    print("the aims (median <= 5%, worst <= 10%): " + ("met" if aims else "not met; " + (
        f"all {len(out)} held out within their runs' spread (the verdicts above)" if len(noisy) == len(out) else
        f"{len(noisy)} of {len(out)} held out within their runs' spread")))
    if tmp:
        tmp.cleanup()
    return {"fit": fit, "batch": BATCH, "repeats": a.repeats, "steps": a.steps, "notes": cal.get("notes", []),
            "rows": rows, "held_out_median_abs_error": median(out), "held_out_worst_abs_error": max(out),
            "aims_met": aims, "held_out_within_noise": len(noisy)}
