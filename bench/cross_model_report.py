"""The cross-model benchmark's table (bench/cross_model.py): per held-out
configuration, measured against predicted under calibrations A and B, the
median's uncertainty and compare's verdicts; then per calibration the errors
per model and overall, and what a model without error would read with the
runs' noise (plots/report.py's noise_alone).
"""
import json
import os

from report import noise_alone  # what a model without error would read, measured so
from stats import median, median_half_width
from trace_step import step_of  # one step as the simulator replays one
from wide_repeats import runs_of

LABEL = {"A": "A (transformer-small's runs)", "B": "B (--microbench of the target only)"}


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def rows(out: str, names: list, cals: list) -> tuple:
    errors = {c: {} for c in cals}  # calibration -> model -> [error %]
    verdicts = {c: {} for c in cals}  # calibration -> compare's verdict on the step -> rows
    known = []  # each configuration's median known to (95%, relative) over its repeats
    for name in names:
        model = name.split("_")[0]
        measured = step_of(f"{out}/runs/{name}.json")
        known.append(median_half_width([step_of(f) for f in runs_of(f"{out}/runs", name)]))
        row = f"{name:<34} {measured:9.4f} "
        for c in cals:
            p = load(f"{out}/predicted/{name}.{c}.summary.json")["summary"]["step_time_s"]
            e = 100 * (p / measured - 1)
            errors[c].setdefault(model, []).append(e)
            row += f"{p:9.4f} {e:+6.1f}% "
        cmp = {c: load(f"{out}/predicted/{name}.{c}.compare.json") for c in cals}
        noise = (cmp[cals[0]].get("noise") or {}) if cals else {}
        unc = noise.get("median_uncertainty_rel")
        row += f" {('%.1f%%' % (100 * unc)) if unc is not None else 'n/a':>9}"
        row += f" {('%.1f%%' % (100 * known[-1])) if known[-1] != float('inf') else 'n/a':>10}"
        for c in cals:
            verdict = cmp[c].get("verdict", {}).get("step_time", "unknown")
            verdicts[c][verdict] = verdicts[c].get(verdict, 0) + 1
            row += f"  {verdict:<13}"
        print(row.rstrip())
    return errors, verdicts, known


def report(out: str, names: list) -> dict:
    cals = [c for c in ("A", "B") if all(os.path.exists(f"{out}/predicted/{n}.{c}.summary.json") for n in names)]
    print(f"{'held-out configuration':<34} {'measured':>9} " + " ".join(f"{'pred ' + c:>9} {'error':>7}" for c in cals)
          + f"  {'median +-':>9} {'repeats +-':>10}  " + ", ".join(f"verdict ({c})" for c in cals))
    errors, verdicts, known = rows(out, names, cals)
    print()
    figures = {}
    for c in cals:
        every = [abs(e) for es in errors[c].values() for e in es]
        per = "; ".join(f"{m} median {median(map(abs, es)):.1f}% worst {max(map(abs, es)):.1f}%"
                        for m, es in errors[c].items())
        print(f"{LABEL[c]:<36} median {median(every):.1f}%  worst {max(every):.1f}%   ({per})")
        print(f"{'':<36} verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts[c].items(), key=lambda x: -x[1])))
        figures[c] = {"median_error": median(every), "worst_error": max(every), "verdicts": verdicts[c],
                      "per_model": {m: {"median": median(map(abs, es)), "worst": max(map(abs, es))}
                                    for m, es in errors[c].items()}}
    print("aim: median <= 7%, worst <= 15%")
    n = noise_alone([{"known": k, "bubble_known": None} for k in known], step_aims=(0.07, 0.15))
    if n:
        print(f"noise alone: a model without error, measured as these {n['configurations']} were (each median drawn "
              f"from its repeats' 95% interval), would read median {100 * n['median']:.1f}%, worst "
              f"{100 * n['worst']:.1f}%, and meet the aim in {100 * n['step_aims_met']:.0f}% of such runs")
        figures["noise_alone"] = {k: n[k] for k in ("median", "worst", "step_aims_met")}
    return figures
