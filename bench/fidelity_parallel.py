"""The tensor- and data-parallel section of `python -m bench fidelity`.

Runs the same model with D = 2 replicas (pipetwin run -d 2: twice the
processes, the batch split between the replicas, REDUCE_GRAD all-reducing
each stage's gradients over Gloo), with ZeRO-1 off and on, and with tensor
groups of T = 2 (pipetwin run -t 2: Megatron's split, its all-reduces inside
the actions), over K in {1, 2} x M in {1, 2, 4, 8} x {gpipe, 1f1b};
calibrates on the pipeline section's calibration runs (T = D = 1: the
device) plus these runs with M in {1, 4}; predicts the held-out ones (M in
{2, 8}) with simulate -t/-d --collective ring (Gloo's all-reduce is a ring).

The table: per held-out configuration, the measured and predicted step, the error, the
repeats' spread, and the collectives' own error: each stage's REDUCE_GRAD
duration (D = 2), or each pipeline rank's time in its tensor group's
collectives in the step (T = 2), measured against predicted; then medians
and worst cases.
"""
import json
import os
import re
import statistics

from bench.common import traced_run
from bench.runs import to_file, write_partition
from median_repeat import median_repeats
from stats import median, spread
from trace_step import step_of
from wide_repeats import runs_of

# A variant's options.
VARIANTS = {"d2_zero1off": ["-d", "2"], "d2_zero1on": ["-d", "2", "--zero1"], "t2": ["-t", "2"]}


def reductions(path):
    """Per stage, the median duration (s) of its REDUCE_GRAD events: in a
    measured trace from where the whole data group had posted it
    (otherData.measured.reduction_posts_s), as calibrate reads it; in a
    simulated one (replicas in step) from its start."""
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    posts = trace["otherData"].get("measured", {}).get("reduction_posts_s", {})
    by_stage = {}
    for e in events:
        m = re.fullmatch(r"([0-9]+)REDUCE_GRAD[0-9]*", e["name"])
        if m:
            start, end = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
            start = min(max(posts.get(e["name"], start), start), end)
            by_stage.setdefault(int(m.group(1)), []).append(end - start)
    return {s: median(d) for s, d in by_stage.items()}


def tensor_collectives(path):
    """Per pipeline rank, the seconds its tensor group's members spent in
    their collectives in the trace's step (otherData.measured.ranks[].tp_collective_s
    at the representative step), the members' mean; {} without them."""
    with open(path, encoding="utf-8") as f:
        m = json.load(f)["otherData"].get("measured", {})
    step = m.get("representative_step", 0)
    by_rank = {}
    for r in m.get("ranks", []):
        if len(r.get("tp_collective_s", [])) > step:
            by_rank.setdefault(r["pipeline_rank"], []).append(r["tp_collective_s"][step])
    return {k: statistics.mean(v) for k, v in by_rank.items()}


def table(out, names):
    rows = []
    print(f"{'held-out configuration':<30} {'measured':>9} {'predicted':>9} {'error':>7} {'noise':>6}  "
          f"REDUCE_GRAD per stage (D) or TP collectives per rank (T), measured -> predicted ms (error)")
    for name in names:
        ms = step_of(f"{out}/runs/{name}.json")
        with open(f"{out}/predicted/{name}.summary.json", encoding="utf-8") as f:
            summary = json.load(f)["summary"]
        ps = summary["step_time_s"]
        err = 100 * (ps / ms - 1)
        spread_ = 100 * spread([step_of(p) for p in runs_of(f"{out}/runs", name)])
        mr, pr = reductions(f"{out}/runs/{name}.json"), reductions(f"{out}/predicted/{name}.json")
        red = [(s, mr[s], pr[s], 100 * (pr[s] / mr[s] - 1)) for s in sorted(mr) if s in pr and mr[s] > 0]
        mt, pt = tensor_collectives(f"{out}/runs/{name}.json"), summary.get("tp_collective_s_per_rank", [])
        red += [(k, mt[k], pt[k], 100 * (pt[k] / mt[k] - 1)) for k in sorted(mt) if k < len(pt) and mt[k] > 0]
        rows.append((name, err, spread_, [r[3] for r in red]))
        cells = "  ".join(f"{s}: {m * 1e3:.2f} -> {p * 1e3:.2f} ({e:+.0f}%)" for s, m, p, e in red)
        print(f"{name:<30} {ms:9.4f} {ps:9.4f} {err:+6.2f}% {spread_:5.1f}%  {cells}")
    step = [abs(r[1]) for r in rows]
    red = [abs(e) for r in rows if "_t2" not in r[0] for e in r[3]]
    tp = [abs(e) for r in rows if "_t2" in r[0] for e in r[3]]
    worst = max(rows, key=lambda r: abs(r[1]))
    print()
    print(f"T/D = 2 step error      median {median(step):.2f}%  worst {max(step):.2f}% ({worst[0]}) "
          f"over {len(rows)} held-out configurations")
    if red:
        print(f"REDUCE_GRAD duration    median {median(red):.1f}%  worst {max(red):.1f}% "
              f"over {len(red)} (configuration, stage) reductions")
    if tp:
        print(f"TP collectives          median {median(tp):.1f}%  worst {max(tp):.1f}% "
              f"over {len(tp)} (configuration, rank) step totals")
    within = sum(1 for r in rows if abs(r[1]) <= r[2])
    for tag, label in (("_d2_", "D = 2"), ("_t2", "T = 2")):
        e = [abs(r[1]) for r in rows if tag in r[0]]
        if e:
            print(f"  {label}: step error median {median(e):.2f}%, worst {max(e):.2f}% over {len(e)} configurations")
    print(f"noise                   repeats' spread median {median(r[2] for r in rows):.1f}%; "
          f"{within}/{len(rows)} step errors within their repeats' spread")
    return {"step_error_median": median(step), "step_error_worst": max(step),
            "reduce_grad_error_median": median(red) if red else None, "tp_error_median": median(tp) if tp else None}


def section(pipetwin: str, a, calibrate: list, model: str, batch: int) -> dict:
    """Runs, calibrates and predicts the section under A.out/parallel; returns its figures."""
    out = os.path.join(a.out, "parallel")
    for sub in ("runs", "predicted"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    ks, ms, ss, zs = ((1,), (1, 2), ("gpipe",), ("d2_zero1off",)) if a.quick else \
        ((1, 2), (1, 2, 4, 8), ("gpipe", "1f1b"), tuple(VARIANTS))
    configs = [(s, k, m, z) for k in ks for m in ms for s in ss for z in zs]
    repeats = a.parallel_repeats or a.repeats
    n = 0
    for rep in range(1, repeats + 1):
        for s, k, m, z in configs:
            n += 1
            name = f"{s}_k{k}_m{m}_{z}"
            traced_run(pipetwin, f"{out}/runs/{name}_r{rep}.json",
                       f"[{n:3d}/{len(configs) * repeats}] run {name:<26} repeat {rep}",
                       ["--model", model, "-s", s, "-k", str(k), "-m", str(m)] + VARIANTS[z] +
                       ["--batch", str(batch), "--steps", str(a.steps), "--threads", "1"], not a.no_priority)
    median_repeats(f"{out}/runs")
    fit = (1,) if a.quick else (1, 4)
    pcal = [f"{out}/runs/{s}_k{k}_m{m}_{z}.json" for s, k, m, z in configs if m in fit]
    held = [c for c in configs if c[2] not in fit]
    print(f"\ntensor and data parallelism (T or D = 2): calibrate on the {len(calibrate)} pipeline runs and "
          f"{len(pcal)} parallel runs (M in {{{','.join(map(str, fit))}}}), predict {len(held)} held out")
    to_file([pipetwin, "calibrate"] + calibrate + pcal + ["--hardware", "cpu", "--out", f"{out}/calibrated.yaml"],
            f"{out}/calibrate.txt")
    for line in open(f"{out}/calibrate.txt", encoding="utf-8"):
        if re.search(r"^collectives|^tensor|^  reduce_grad|^  tp_collectives|collective", line):
            print(line, end="")
    for s, k, m, z in held:
        name = f"{s}_k{k}_m{m}_{z}"
        part = write_partition(f"{out}/runs/{name}.json", f"{out}/predicted/{name}.partition")
        to_file([pipetwin, "simulate", "--model", model, "--hardware", f"{out}/calibrated.yaml", "-s", s, "-k", str(k),
                 "-m", str(m)] + VARIANTS[z] + ["--batch", str(batch), "--collective", "ring", "--trace",
                                               f"{out}/predicted/{name}.json", "--json", "--partition", part],
                f"{out}/predicted/{name}.summary.json")
    return table(out, [f"{s}_k{k}_m{m}_{z}" for s, k, m, z in held])
