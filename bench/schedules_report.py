"""The schedules benchmark's two tables (bench/schedules.py): every generator
simulated on 8 x H100 (step, bubble, peak memory per stage and per rank, the
sweep's verdict), and run on this CPU against the calibrated simulator.
"""
import csv
import json
import os
import sys

from stats import median
from trace_step import counted, step_of  # one step as the simulator replays one


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def refusal(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read().strip().splitlines()[-1].replace("pipetwin: error: ", "")


def placement(trace: str) -> list:  # stage -> rank, from the Program the trace records
    for line in load(trace)["otherData"]["program"].splitlines():
        if line.startswith("stage_to_rank "):
            return [int(r) for r in line.split()[1:]]
    return []


def h100_row(sim: str, row: tuple, sweeps: dict) -> dict | None:
    s, v, k, m, name, path = row
    if path not in sweeps:
        with open(path, encoding="utf-8") as f:
            sweeps[path] = {r["schedule"]: r for r in csv.DictReader(f)}
    r = sweeps[path].get(s)
    head = f"{s:<17} {v:>1} {k:>2} {m:>3}"
    if os.path.exists(f"{sim}/{name}.refused"):
        print(f"{head} {'':>5} {'':>9} {'':>7}  {'':<40} {'':>10}  refused: {refusal(f'{sim}/{name}.refused')}")
        return None
    if r is None:
        print(f"{head}  (no row in {path})")
        return None
    summary = f"{sim}/{name}.summary.json"
    if r["status"] == "error" or not r["step_time_s"] or not os.path.exists(summary):
        what = "does not fit" if r["status"] == "oom" else r["status"]
        print(f"{head} {r['batch']:>5} {'':>9} {'':>7}  {'':<40} {'':>10}  {what}: {r['reason']}")
        return None
    sm = load(summary)["summary"]
    peaks = [x["peak_bytes"] / 1e9 for x in sm["memory_per_stage"]]
    per_stage = " ".join(f"{p:.1f}" for p in peaks) if len(peaks) <= 8 else \
        f"{min(peaks):.1f}..{max(peaks):.1f} ({len(peaks)} stages)"
    ranks = {}
    for stage, rank in enumerate(placement(f"{sim}/{name}.json")):
        ranks[rank] = ranks.get(rank, 0) + peaks[stage]
    worst = max(ranks.values())
    step, bubble = float(r["step_time_s"]), float(r["bubble_fraction"])
    # The sweep's and simulate's answers are the same configuration's.
    if abs(sm["step_time_s"] / step - 1) > 1e-6 or abs(max(peaks) - float(r["max_stage_memory_gb"])) > 1e-3:
        print(f"warning: {name}: sweep and simulate disagree ({step} s / {sm['step_time_s']} s)", file=sys.stderr)
    fits = "yes" if r["status"] == "ok" else f"does not fit: {r['reason']}"
    if r["status"] == "ok" and int(v) > 1 and worst > sm["memory_per_stage"][0]["capacity_bytes"] / 1e9:
        fits += " (a rank's stages together exceed it)"
    print(f"{head} {r['batch']:>5} {1e3 * step:6.2f} ms {100 * bubble:6.1f}%  {per_stage:<40} {worst:7.1f} GB  {fits}")
    return {"name": name, "step_s": step, "bubble": bubble, "peak_gb_per_stage": peaks, "worst_rank_gb": worst,
            "fits": fits}


def h100(sim: str, rows: list) -> list:
    print(f"{'schedule':<17} {'V':>1} {'K':>2} {'M':>3} {'batch':>5} {'step':>9} {'bubble':>7}  "
          f"{'peak memory per stage (GB)':<40} {'worst rank':>10}  fits")
    sweeps = {}
    return [x for x in (h100_row(sim, row, sweeps) for row in rows) if x]


def cpu(folder: str, rows: list) -> dict:
    errors, bubble_errors, out = [], [], []
    print(f"{'schedule':<17} {'V':>1} {'K':>2} {'M':>3} {'batch':>5} {'measured':>10} {'predicted':>10} {'error':>7}  "
          f"{'bubble m/p':>13}  verdict")
    for s, v, k, m, b, name in rows:
        head = f"{s:<17} {v:>1} {k:>2} {m:>3} {b:>5}"
        if os.path.exists(f"{folder}/runs/{name}.refused"):
            print(f"{head}  refused: {refusal(f'{folder}/runs/{name}.refused')}")
            continue
        if not os.path.exists(f"{folder}/predicted/{name}.compare.json"):
            print(f"{head}  run failed: {folder}/runs/{name}.log")
            continue
        trace = f"{folder}/runs/{name}.json"
        measured = step_of(trace)
        recorded = load(trace)["otherData"]["measured"]
        mb = median(counted(recorded, recorded.get("bubble_fractions") or []))
        p = load(f"{folder}/predicted/{name}.summary.json")["summary"]
        ps, pb = p["step_time_s"], p["bubble_fraction"]
        err = 100 * (ps / measured - 1)
        errors.append((abs(err), name))
        bubble_errors.append(abs(100 * (pb - mb)))
        verdict = load(f"{folder}/predicted/{name}.compare.json").get("verdict", {}).get("step_time", "unknown")
        print(f"{head} {1e3 * measured:7.1f} ms {1e3 * ps:7.1f} ms {err:+6.1f}%  {100 * mb:5.1f}/{100 * pb:5.1f}%  "
              f"{verdict}")
        out.append({"name": name, "measured_s": measured, "predicted_s": ps, "error": err, "verdict": verdict})
    print()
    figures = {"rows": out}
    if errors:
        worst = max(errors)
        print(f"step time error    median {median(e for e, _ in errors):.1f}%  worst {worst[0]:.1f}% ({worst[1]})"
              f"  over {len(errors)} configurations")
        print(f"bubble error       median {median(bubble_errors):.1f} points  worst {max(bubble_errors):.1f} points")
        figures.update(step_error_median=median(e for e, _ in errors), step_error_worst=worst[0],
                       bubble_error_median=median(bubble_errors))
    return figures
