"""The tensor- and data-parallel section's table (scripts/fidelity_parallel.sh):
per held-out configuration, the measured and predicted step, the error, the
repeats' spread, and the collectives' own error: each stage's REDUCE_GRAD
duration (D = 2), or each pipeline rank's time in its tensor group's
collectives in the step (T = 2), measured against predicted; then medians
and worst cases.

    python3 scripts/fidelity_parallel.py OUT/parallel NAME...
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_step import step_of  # noqa: E402


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
    return {s: statistics.median(d) for s, d in by_stage.items()}


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


def repeats(out, name):
    paths = [p for p in glob.glob(f"{out}/runs/{name}_r*.json")
             if re.fullmatch(re.escape(name) + r"_r[0-9]+\.json", os.path.basename(p))]
    return [step_of(p) for p in sorted(paths)]


def main(out, names):
    rows = []
    print(f"{'held-out configuration':<30} {'measured':>9} {'predicted':>9} {'error':>7} {'noise':>6}  "
          f"REDUCE_GRAD per stage (D) or TP collectives per rank (T), measured -> predicted ms (error)")
    for name in names:
        ms = step_of(f"{out}/runs/{name}.json")
        with open(f"{out}/predicted/{name}.summary.json", encoding="utf-8") as f:
            summary = json.load(f)["summary"]
        ps = summary["step_time_s"]
        err = 100 * (ps / ms - 1)
        reps = repeats(out, name)
        spread = 100 * (max(reps) - min(reps)) / statistics.median(reps) if len(reps) > 1 else 0.0
        mr, pr = reductions(f"{out}/runs/{name}.json"), reductions(f"{out}/predicted/{name}.json")
        red = [(s, mr[s], pr[s], 100 * (pr[s] / mr[s] - 1)) for s in sorted(mr) if s in pr and mr[s] > 0]
        mt, pt = tensor_collectives(f"{out}/runs/{name}.json"), summary.get("tp_collective_s_per_rank", [])
        red += [(k, mt[k], pt[k], 100 * (pt[k] / mt[k] - 1)) for k in sorted(mt) if k < len(pt) and mt[k] > 0]
        rows.append((name, err, spread, [r[3] for r in red]))
        cells = "  ".join(f"{s}: {m * 1e3:.2f} -> {p * 1e3:.2f} ({e:+.0f}%)" for s, m, p, e in red)
        print(f"{name:<30} {ms:9.4f} {ps:9.4f} {err:+6.2f}% {spread:5.1f}%  {cells}")
    step = [abs(r[1]) for r in rows]
    red = [abs(e) for r in rows if "_t2" not in r[0] for e in r[3]]
    tp = [abs(e) for r in rows if "_t2" in r[0] for e in r[3]]
    worst = max(rows, key=lambda r: abs(r[1]))
    print()
    print(f"T/D = 2 step error      median {statistics.median(step):.2f}%  worst {max(step):.2f}% ({worst[0]}) "
          f"over {len(rows)} held-out configurations")
    if red:
        print(f"REDUCE_GRAD duration    median {statistics.median(red):.1f}%  worst {max(red):.1f}% "
              f"over {len(red)} (configuration, stage) reductions")
    if tp:
        print(f"TP collectives          median {statistics.median(tp):.1f}%  worst {max(tp):.1f}% "
              f"over {len(tp)} (configuration, rank) step totals")
    within = sum(1 for r in rows if abs(r[1]) <= r[2])
    for tag, label in (("_d2_", "D = 2"), ("_t2", "T = 2")):
        e = [abs(r[1]) for r in rows if tag in r[0]]
        if e:
            print(f"  {label}: step error median {statistics.median(e):.2f}%, worst {max(e):.2f}% over {len(e)} configurations")
    print(f"noise                   repeats' spread median {statistics.median(r[2] for r in rows):.1f}%; "
          f"{within}/{len(rows)} step errors within their repeats' spread")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: fidelity_parallel.py OUT/parallel NAME...")
    try:
        main(sys.argv[1], sys.argv[2:])
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"fidelity_parallel.py: {e}")
