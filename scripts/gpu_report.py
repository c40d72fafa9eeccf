"""The tables of scripts/gpu_check.sh, from the files its parts wrote:

    python3 scripts/gpu_report.py generators < `pipetwin schedule --list --json`
        the generators the memory part runs ("NAME V" a line; pipedream left
        out; GPU_CHECK_SCHEDULES=a,b narrows them)
    python3 scripts/gpu_report.py memory OUT/memory "NAME V"...
        each rank's peak allocated, measured against predicted, and the stash
    python3 scripts/gpu_report.py timing OUT/timing "M MB"...
        one rank's step, measured against the h100 preset and the calibrated file
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plots"))
from stats import median  # noqa: E402


def generators(listing: dict) -> None:
    want = os.environ.get("GPU_CHECK_SCHEDULES", "").split(",")
    for g in listing:
        if g["name"] != "pipedream" and (want == [""] or g["name"] in want):
            print(g["name"], 2 if g.get("virtual_stages") or g.get("fixed_stages_per_rank", 0) == 2 else 1)


def memory(d: str, gens: list) -> None:
    print("transformer-24 (bf16, Adam), K=4 M=8 micro-batch 4, four ranks on one GPU: peak allocated per rank,")
    print("measured (CUDA caching allocator) / predicted (simulate --hardware h100, memory_per_rank), GB")
    print(f"{'schedule':<17} {'V':>2}  {'rank 0':>15} {'rank 1':>15} {'rank 2':>15} {'rank 3':>15}  worst |err|  "
          "stash |err| max")
    errs = []
    for g in gens:
        s, v = g.split()
        try:
            with open(f"{d}/{s}.predicted.json", encoding="utf-8") as f:
                summary = json.load(f)["summary"]
            # memory_per_rank where a rank holds several stages; else stage r is rank r's
            pred = summary.get("memory_per_rank") or summary["memory_per_stage"]
            with open(f"{d}/{s}.r0.json", encoding="utf-8") as f:
                measured = json.load(f)["measured"]  # rank 0 gathers every rank's
        except (OSError, ValueError, KeyError) as e:
            print(f"{s:<17} {v:>2}  no result ({e})")
            continue
        cells, worst, stash = [], 0.0, 0.0
        for r in range(4):
            m = next(x for x in measured["ranks"] if x["rank"] == r)["peak_allocated_bytes"]
            p = pred[r]["peak_bytes"]
            worst = max(worst, abs(m / p - 1))
            cells.append(f"{m / 1e9:6.2f}/{p / 1e9:6.2f}")
        for st in measured["stages"]:
            if st.get("predicted_peak_stash_bytes", 0) > 0:
                stash = max(stash, abs(st["peak_stash_bytes"] / st["predicted_peak_stash_bytes"] - 1))
        errs.append(worst)
        print(f"{s:<17} {v:>2}  " + " ".join(f"{c:>15}" for c in cells) + f"  {100 * worst:9.1f}%  {100 * stash:9.1f}%")
    if errs:
        print(f"rank peak |error| median {100 * median(errs):.1f}%  worst {100 * max(errs):.1f}% over {len(errs)} schedules")


def timing(d: str, configs: list) -> None:
    print("transformer-24 (bf16, Adam), one rank on the GPU, gpipe K=1: step time (median of 5 steps after the first)")
    print(f"{'M':>2} {'mb':>3}  {'measured':>10}  {'h100 preset':>12} {'err':>7}  {'calibrated':>11} {'err':>7}  fit on")
    for cfg in configs:
        m, b = cfg.split()
        try:
            with open(f"{d}/m{m}_b{b}.summary.json", encoding="utf-8") as f:
                meas = json.load(f)["summary"]["step_time_s"]
        except (OSError, ValueError, KeyError):
            print(f"{m:>2} {b:>3}  no measurement")
            continue
        row = f"{m:>2} {b:>3}  {1e3 * meas:8.1f}ms"
        for name in ("h100", "calibrated"):
            try:
                with open(f"{d}/m{m}_b{b}.{name}.predicted.json", encoding="utf-8") as f:
                    p = json.load(f)["summary"]["step_time_s"]
                row += f"  {1e3 * p:9.1f}ms {100 * (p / meas - 1):+6.1f}%"
            except (OSError, ValueError, KeyError):
                row += f"  {'-':>11} {'-':>7}"
        fit = "yes" if (m, b) in (("1", "4"), ("2", "2"), ("4", "4")) else "held out"
        print(row + "  " + fit)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "generators":
        try:
            generators(json.load(sys.stdin))
        except (ValueError, KeyError, TypeError) as e:
            sys.exit(f"gpu_report.py generators: no `pipetwin schedule --list --json` on stdin: {e!r}")
    elif what in ("memory", "timing") and len(sys.argv) >= 3:
        (memory if what == "memory" else timing)(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
