"""The fidelity benchmark's table (bench/fidelity.py): per held-out
configuration, measured against predicted step, bubble and peak stash per
stage, the repeats' noise and the run's compute pace; then medians, worst
cases, the noise of every configuration and what a model without error would
read with it (plots/report.py's noise_alone).
"""
import glob
import json
import os

from report import noise_alone  # what a model without error would read with that noise
from stats import iqr_rel, median, median_half_width, spread
from trace_step import counted, step_of  # one step as the simulator replays one


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def repeat_files(out: str, name: str) -> list:  # every repeat of a configuration, extra ones included
    return sorted(glob.glob(f"{out}/runs/{name}_r[0-9]*.json"))


def steps_bubbles(path: str) -> list:  # every recorded step's bubble but the warm-up's
    measured = load(path)["otherData"]["measured"]
    return counted(measured, measured.get("bubble_fractions") or [])


def bubble_of(path: str) -> float:
    """The mean over ranks of the share of a step not in compute: the median
    of the run's steps (the warm-up left out) where it recorded each step's,
    as calibrate reads it; else that of the trace's one step."""
    every = steps_bubbles(path)
    if every:
        return median(every)
    events = [e for e in load(path)["traceEvents"] if e.get("ph") == "X"]
    ms = step_of(path)
    ranks = sorted({e["pid"] for e in events})
    busy = [sum(e["dur"] for e in events if e["pid"] == r and e.get("cat") == "compute") / 1e6 for r in ranks]
    return sum(1 - b / ms for b in busy) / len(busy)


def pooled_bubble(out: str, name: str) -> float:
    """The median over the steps of all the configuration's repeats: a
    repeat's steps share its state, so one repeat's median moves by several
    points at K >= 2. Runs that recorded no step's bubble: the median repeat's."""
    pooled = [b for path in repeat_files(out, name) for b in steps_bubbles(path)]
    return median(pooled) if pooled else bubble_of(f"{out}/runs/{name}.json")


def host_cores(meta: dict) -> int:  # the cores the run's ranks could use, as recorded (older traces: this machine's)
    cores = [r.get("host_cores", 0) for r in meta["measured"]["ranks"]]
    return min(cores) if cores and min(cores) > 0 else os.cpu_count()


def compute_pace(out: str, name: str) -> float:
    """The run's compute actions, measured (each until the next action on its
    rank starts, as calibration reads them) over predicted, in total: how much
    slower (+) or faster (-) the machine ran them than the calibrated model says."""
    def actions(path):
        events = [e for e in load(path)["traceEvents"] if e.get("ph") == "X"]
        by_rank = {}
        for e in events:
            by_rank.setdefault(e["pid"], []).append(e)
        for rank in by_rank.values():
            rank.sort(key=lambda e: e["ts"])
            for i, e in enumerate(rank):
                e["paced"] = (rank[i + 1]["ts"] if i + 1 < len(rank) else e["ts"] + e["dur"]) - e["ts"]
        return {(e["pid"], e["name"]): e for e in events}
    m, p = actions(f"{out}/runs/{name}.json"), actions(f"{out}/predicted/{name}.json")
    keys = [k for k, e in p.items() if e.get("cat") == "compute" and k in m]
    return 100 * (sum(m[k]["paced"] for k in keys) / sum(p[k]["dur"] for k in keys) - 1)


def held_out_row(out: str, name: str) -> dict:
    m = load(f"{out}/runs/{name}.json")["otherData"]
    p = load(f"{out}/predicted/{name}.summary.json")
    pt = load(f"{out}/predicted/{name}.json")["otherData"]
    ms = step_of(f"{out}/runs/{name}.json")
    mb = pooled_bubble(out, name)
    ps, pb = p["summary"]["step_time_s"], p["summary"]["bubble_fraction"]
    measured_stash = [s["peak_stash_bytes"] for s in m["measured"]["stages"]]
    stash = [100 * (q / w - 1) for q, w in zip(pt["predicted_stash_bytes_per_stage"], measured_stash)]
    reps = [step_of(path) for path in repeat_files(out, name)]
    against = [100 * (ps / r - 1) for r in reps]
    bubbles = [100 * bubble_of(path) for path in repeat_files(out, name)]
    row = {"name": name, "measured_s": ms, "predicted_s": ps, "error": 100 * (ps / ms - 1),
           "measured_bubble": mb, "predicted_bubble": pb, "bubble_error": 100 * (pb - mb), "stash": stash,
           "spread": 100 * spread(reps), "nearest": min(against, key=abs), "low": min(against), "high": max(against),
           "pace": compute_pace(out, name),
           "own_cores": m["ranks"] * m["measured"]["ranks"][0]["threads"] <= host_cores(m),
           "bubble_spread": max(bubbles) - min(bubbles), "bubble_against": [100 * pb - b for b in bubbles],
           "bubble_error_median_repeat": 100 * (pb - bubble_of(f"{out}/runs/{name}.json")),
           "known": median_half_width(reps), "engine": p["summary"]["engine"].split()[0]}
    print(f"{name:<22} {ms:9.4f} {ps:9.4f} {row['error']:+6.2f}%  {100*mb:5.1f}/{100*pb:5.1f}% {100*(pb-mb):+5.1f}  "
          f"{row['spread']:5.1f}% {row['low']:+8.2f}..{row['high']:+6.2f}% {row['pace']:+5.1f}%  "
          f"{' '.join(f'{s:+.1f}%' for s in stash):<28} {row['engine']}")
    return row


def summary(rows: list, ks: tuple) -> dict:
    step = [abs(r["error"]) for r in rows]
    bubble = [abs(r["bubble_error"]) for r in rows]
    stash = [abs(s) for r in rows for s in r["stash"]]
    worst = max(rows, key=lambda r: abs(r["error"]))
    one = [abs(r["bubble_error_median_repeat"]) for r in rows]
    print()
    print(f"step time error    median {median(step):.2f}%  worst {max(step):.2f}% ({worst['name']})   target <= 5% "
          f"(aim 3%), worst <= 10%")
    print(f"bubble error       median {median(bubble):.2f} points  worst {max(bubble):.2f} points   target <= 3 points"
          f"   (measured: the median of every step of the repeats)")
    print(f"  within 3 points: {sum(b <= 3 for b in bubble)}/{len(rows)} configurations ("
          + ", ".join(f"K={K} {sum(abs(r['bubble_error']) <= 3 for r in rows if f'_k{K}_' in r['name'])}/"
                      f"{sum(f'_k{K}_' in r['name'] for r in rows)}" for K in ks) + ")")
    print(f"  against the median-time repeat's steps alone: median {median(one):.2f} points, worst "
          f"{max(one):.2f}, within 3 points {sum(b <= 3 for b in one)}/{len(rows)}")
    print(f"peak stash error   median {median(stash):.2f}%  worst {max(stash):.2f}%   target within 5%")
    per_k = {}
    for K in ks:
        e = [abs(r["error"]) for r in rows if f"_k{K}_" in r["name"]]
        if e:
            print(f"  K={K}: step error median {median(e):.2f}%, worst {max(e):.2f}% over {len(e)} configurations")
            per_k[K] = {"median": median(e), "worst": max(e)}
    return {"step_error_median": median(step), "step_error_worst": max(step), "bubble_error_median": median(bubble),
            "bubble_error_worst": max(bubble), "stash_error_median": median(stash), "stash_error_worst": max(stash),
            "per_k": per_k}


def every_configuration_noise(out: str) -> tuple:
    """The repeats' spread of every configuration (calibration ones too), the
    same work's CPU time over them, and the steps' spread inside one run."""
    spreads, inside, cpu_spreads = [], [], []
    for f in sorted(glob.glob(f"{out}/runs/*_r1.json")):
        files = repeat_files(out, os.path.basename(f)[: -len("_r1.json")])
        if len(files) > 1:
            spreads.append(100 * spread([step_of(p) for p in files]))
        cpu = [load(p)["otherData"]["measured"]["noise"].get("compute_cpu_median_s", 0) for p in files]
        if len(cpu) > 1 and min(cpu) > 0:
            cpu_spreads.append(100 * spread(cpu))
        measured = load(f)["otherData"]["measured"]
        steps = counted(measured, measured["step_times_s"])
        if len(steps) >= 4:
            inside.append(100 * iqr_rel(steps))
    return spreads, inside, cpu_spreads


def noise_section(out: str, rows: list) -> dict:
    spreads, inside, cpu_spreads = every_configuration_noise(out)
    if not spreads:
        return {}
    within = sum(1 for r in rows if r["low"] <= 0 <= r["high"] or abs(r["error"]) <= r["spread"])
    nearest = [abs(r["nearest"]) for r in rows]
    print(f"noise              repeats' spread (max - min) / median: median {median(spreads):.2f}%, "
          f"worst {max(spreads):.2f}% over {len(spreads)} configurations; steps inside a run (IQR / median): median "
          f"{median(inside) if inside else float('nan'):.2f}%")
    if cpu_spreads:
        print(f"                   the same work's CPU time over the repeats (max - min) / median: median "
              f"{median(cpu_spreads):.2f}%, worst {max(cpu_spreads):.2f}% over {len(cpu_spreads)} "
              f"configurations (the host's pace, which /proc/stat does not show)")
    print(f"                   held out: {within}/{len(rows)} errors within their repeats' spread; against the nearest "
          f"repeat: median {median(nearest):.2f}%, worst {max(nearest):.2f}%")
    bspread = [r["bubble_spread"] for r in rows]
    bnear = [min(abs(e) for e in r["bubble_against"]) for r in rows]
    print(f"                   bubble: repeats' spread median {median(bspread):.2f} points, worst "
          f"{max(bspread):.2f}; against the nearest repeat: median {median(bnear):.2f} points, worst "
          f"{max(bnear):.2f}, within 3 points {sum(b <= 3 for b in bnear)}/{len(rows)}")
    figures = {"repeats_spread_median": median(spreads), "within_spread": within}
    n = noise_alone([{"known": r["known"], "bubble_known": None} for r in rows], step_aims=(0.03, 0.08))
    if n:
        print(f"                   noise alone: a model without error, measured as these {n['configurations']} were, "
              f"would read median {100 * n['median']:.2f}%, worst {100 * n['worst']:.2f}%, and meet median <= 3% and "
              f"worst <= 8% in {100 * n['step_aims_met']:.0f}% of such runs")
        figures["noise_alone"] = {k: n[k] for k in ("median", "worst", "step_aims_met")}
    return figures


def report(out: str, names: list, ks: tuple = (1, 2, 4)) -> dict:
    print(f"{'held-out configuration':<22} {'measured':>9} {'predicted':>9} {'error':>7}  {'bubble m/p':>13} {'error':>6}  "
          f"{'noise':>6} {'error vs each repeat':>20} {'pace':>6}  {'stash error per stage':<28} engine")
    rows = [held_out_row(out, name) for name in names]
    figures = summary(rows, ks)
    figures["noise"] = noise_section(out, rows)
    # The compute pace: where no rank waits for a core, the step error with
    # the prediction's compute scaled by the run's own pace.
    net = [(r["name"], 100 * ((1 + r["error"] / 100) * (1 + r["pace"] / 100) - 1)) for r in rows if r["own_cores"]]
    if net:
        worst_net = max(net, key=lambda r: abs(r[1]))
        print(f"compute pace       where ranks x threads <= cores: step error with the run's own compute pace: median "
              f"{median(abs(e) for _, e in net):.2f}%, worst {abs(worst_net[1]):.2f}% ({worst_net[0]}) over "
              f"{len(net)} configurations")
    figures["held_out"] = [{k: r[k] for k in ("name", "measured_s", "predicted_s", "error", "measured_bubble",
                                              "predicted_bubble", "stash", "spread", "pace")} for r in rows]
    return figures
