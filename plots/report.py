"""The report of a predict -> run -> calibrate -> compare loop, in Markdown:
the configurations compared (held out from the calibration), their
predicted and measured step times, bubbles and peak stashes with the errors,
the noise each run recorded and what it makes of each error (within noise,
model error, or not meaningful on a busy machine: left out of the median and
worst errors, said so), what that noise alone would make of a model without
error (noise_alone), and the pictures, from files the CLI wrote
(`pipetwin compare --json` outputs, plots made by `pipetwin plot`).

  python plots/report.py --compare C1.json C2.json ... --image "Gantt=gantt.png" ... \
      [--calibrated-on "text"] [--probe P1.json ...] [--title T] --out PREFIX        -> PREFIX.md

--probe: `pipetwin probe --json` outputs (the host's cores, probed around
the runs): a paragraph says what they found.
"""

from __future__ import annotations

import math
import os
import random

from common import PlotError, TraceMeta, load_json, parser, run_main, write_text
from stats import median


def row(path: str) -> dict:
    doc = load_json(path)
    for field in ("configuration", "step_time_s", "bubble_fraction", "stash_bytes_per_stage"):
        if field not in doc:
            raise PlotError(f"{path}: not a 'pipetwin compare --json' report (no '{field}')")
    c = doc["configuration"]
    step = doc["step_time_s"]
    stash_errors = [abs(s["relative_error"]) for s in doc["stash_bytes_per_stage"].get("stages", [])
                    if s.get("relative_error") is not None]
    # The measured bubble: the median of the run's steps where the comparison
    # has it (compare's measured_over_steps), else the traced step's.
    bubble = doc["bubble_fraction"]
    measured_bubble, bubble_points = bubble["measured"], bubble["error_points"]
    over = bubble.get("measured_over_steps")
    bubble_known = None  # with repeats: the points its median over the runs is known to (95%)
    if isinstance(over, dict) and "median" in over and "error_points" in over:
        measured_bubble, bubble_points = over["median"], over["error_points"]
        bubble_known = over.get("uncertainty_points")
    batch = c["microbatches"] * c["microbatch_size"] if "microbatch_size" in c and "microbatches" in c else "?"
    name = (f"{c.get('schedule')} K={c.get('ranks')} M={c.get('microbatches')} "
            f"batch={batch} recompute={c.get('recompute')}")
    noise = doc.get("noise") if isinstance(doc.get("noise"), dict) else None
    verdicts = doc.get("verdict") if isinstance(doc.get("verdict"), dict) else {}
    verdict = verdicts.get("step_time", "unknown")
    # What the measurement may carry, as the verdict reads it: the wider of its
    # run's band (its steps' 95% interval and the load beside them) and, where
    # compare had them (--repeats), its repeats' interval from run to run.
    repeats = doc.get("repeats") if isinstance(doc.get("repeats"), dict) else None
    known = [(noise.get("band_rel") or noise.get("median_uncertainty_rel") or 0)] if noise else []
    known += [repeats.get("median_uncertainty_rel") or 0] if repeats else []
    # With repeats, the prediction is held against their median (compare's verdict).
    measured, error = step["measured"], step["relative_error"]
    if repeats and repeats.get("median_s") and repeats.get("relative_error") is not None:
        measured, error = repeats["median_s"], repeats["relative_error"]
    return {
        "ranks": c.get("ranks"),
        "host_cores": host_cores(doc.get("measured")),
        "known": max(known) if known else 0,
        "runs": len(repeats.get("steps_s", [])) if repeats else 1,
        "name": name,
        "noise": noise,
        "verdict": verdict,
        "predicted": step["predicted"],
        "measured": measured,
        "error": error,
        "bubble_predicted": doc["bubble_fraction"]["predicted"],
        "bubble_measured": measured_bubble,
        "bubble_points": bubble_points,
        "bubble_known": bubble_known,
        "bubble_verdict": verdicts.get("bubble", "unknown"),
        "stash_worst": max(stash_errors) if stash_errors else None,
        "pace_spread": pace_spread(repeats),
    }


def pace_spread(repeats: dict | None) -> float | None:
    """How far apart the same work's CPU time was over a configuration's runs
    (compare --repeats' compute_cpu_s: each run's compute actions' own CPU
    time a step): max / min - 1, the host's pace; None where they did not all
    measure it."""
    cpu = repeats.get("compute_cpu_s") if repeats else None
    if not isinstance(cpu, list) or len(cpu) < 2 or not all(isinstance(c, (int, float)) and c > 0 for c in cpu):
        return None
    return max(cpu) / min(cpu) - 1


def host_cores(measured) -> int | None:
    """The cores of the host the measured run ran on (TraceMeta.host_cores of
    the compared trace), or None where the trace cannot be read or did not record them."""
    if not isinstance(measured, str):
        return None
    try:
        doc = load_json(measured)
    except PlotError:
        return None
    return TraceMeta(doc.get("otherData") if isinstance(doc, dict) else None).host_cores


def pace_line(rows: list[dict]) -> list[str]:
    """What the runs' own CPU time says of the host's pace: the same work of a
    configuration took that much more CPU time in its slowest run than in its
    fastest, which no counter of /proc/stat shows (a hypervisor running
    another guest on the core without counting it as steal, a sibling
    hyper-thread, the clock)."""
    spreads = [r["pace_spread"] for r in rows if r.get("pace_spread") is not None]
    if not spreads:
        return []
    worst = max(rows, key=lambda r: r.get("pace_spread") or -1)
    return [f"The host's pace: over the runs of each configuration, the same compute took a median "
            f"{100 * median(spreads):.0f}% more CPU time in its slowest run than in its fastest (worst "
            f"{100 * worst['pace_spread']:.0f}%, {worst['name']}). Each rank's compute actions are timed on its own "
            "thread's CPU clock, so waiting for a core does not count: the work itself ran slower, and the model, "
            "calibrated at the pace of its own runs, cannot follow it.", ""]


def shared_cores_line(rows: list[dict]) -> list[str]:
    """Where a held-out configuration ran more ranks than its host has cores:
    its bubble is the least certain figure of the table, and why."""
    shared = [r for r in rows if r.get("host_cores") and r.get("ranks") and r["ranks"] > r["host_cores"]]
    if not shared:
        return []
    names = ", ".join(f"{r['name']} ({r['ranks']} ranks on {r['host_cores']} cores)" for r in shared)
    return [f"More ranks than cores: {names}. There the operating system decides which rank runs, and a rank "
            "that waits for a core inside a forward or backward counts as busy in the bubble. The calibration "
            "models that by choosing one of a few ways of sharing the cores, which predict nearly the same step "
            "but bubbles several points apart (docs/calibration.md, \"The four-rank bubble\"): this bubble is the least "
            "certain figure of the table. With a core per rank, as on an accelerator per rank, it does not arise.",
            ""]


# The demo's aims for its held-out configurations (docs/calibration.md).
STEP_AIMS = (0.05, 0.10)  # median and worst |error|, relative
BUBBLE_AIM = 3.0  # worst |error|, points
DRAWS = 10000


def noise_alone(rows: list[dict], draws: int = DRAWS, seed: int = 1,
                step_aims: tuple[float, float] = STEP_AIMS) -> dict | None:
    """What the measurements' noise alone makes of the summary's figures: a
    model without error, its every configuration's measured median drawn from
    a normal of that configuration's 95% interval (known / 1.96, relative;
    rows without a finite one left out), step and bubble apart. Returns the
    medians over `draws` of the median and worst |error|, and the share of
    draws that meet the aims (step_aims: median and worst); None where no row
    carries an interval. Seeded: the same rows give the same figures.
    (python -m bench cross_model and fidelity read it too, with their own aims.)"""
    steps = [r["known"] / 1.96 for r in rows if r["known"] and math.isfinite(r["known"])]
    bubbles = [r["bubble_known"] / 1.96 for r in rows if r["bubble_known"]]
    if not steps:
        return None
    rng = random.Random(seed)
    medians, worsts, met, bubble_met = [], [], 0, 0
    for _ in range(draws):
        e = [abs(rng.gauss(0, sd)) for sd in steps]
        medians.append(median(e))
        worsts.append(max(e))
        met += medians[-1] <= step_aims[0] and worsts[-1] <= step_aims[1]
        if bubbles:
            bubble_met += max(abs(rng.gauss(0, sd)) for sd in bubbles) <= BUBBLE_AIM
    return {"configurations": len(steps), "median": median(medians), "worst": median(worsts),
            "step_aims_met": met / draws, "bubble_configurations": len(bubbles),
            "bubble_aim_met": bubble_met / draws if bubbles else None}


def noise_alone_line(rows: list[dict]) -> list[str]:
    """The paragraph that says how far the figures above can speak for the
    model: what a model without error would show with this noise."""
    n = noise_alone(rows)
    if n is None:
        return []
    text = (f"What the noise alone would show: a model without error, measured as these {n['configurations']} were "
            f"(each median drawn from its 95% interval), would read median |error| {100 * n['median']:.1f}% and "
            f"worst {100 * n['worst']:.1f}% (medians of {DRAWS} draws), and meet the step aims (median "
            f"<= {100 * STEP_AIMS[0]:.0f}%, worst <= {100 * STEP_AIMS[1]:.0f}%) in {100 * n['step_aims_met']:.0f}% "
            "of such runs")
    if n["bubble_aim_met"] is not None:
        text += (f", the bubble's (within {BUBBLE_AIM:.0f} points, over the {n['bubble_configurations']} with an "
                 f"interval) in {100 * n['bubble_aim_met']:.0f}%")
    text += "."
    if n["step_aims_met"] < 0.5:
        text += (" On a machine this noisy, figures beyond the aims say little about the model: measure again "
                 "when it is quieter (`pipetwin probe`), or with more repeats.")
    return [text, ""]


def probe_line(paths: list[str]) -> list[str]:
    """What `pipetwin probe` found around the runs, in one paragraph."""
    if not paths:
        return []
    docs = []
    for path in paths:
        doc = load_json(path)
        for field in ("threads", "rounds", "short_rounds", "short_fraction", "cores_delivered_median", "alone_spread",
                      "steal_share"):
            if field not in doc:
                raise PlotError(f"{path}: not a 'pipetwin probe --json' output (no '{field}')")
        docs.append(doc)
    rounds = sum(len(d["rounds"]) for d in docs)
    short = sum(d["short_rounds"] for d in docs)
    threads = docs[0]["threads"]
    delivered = [r["cores_delivered"] for d in docs for r in d["rounds"]]
    spread = max(d["alone_spread"] for d in docs)
    steal = max(d["steal_share"] for d in docs)
    disturbed = sum(d.get("disturbed_rounds", 0) for d in docs)
    text = (f"The host's cores, probed around the runs (`pipetwin probe`, {rounds} rounds): {threads} threads together "
            f"had {median(delivered):.2f} cores' worth of pace in the median round, under "
            f"{docs[0]['short_fraction'] * threads:.2f} in {short} of {rounds} (the least {min(delivered):.2f}); a core's pace alone spread "
            f"{spread:.2f}x from round to round; /proc/stat showed {100 * steal:.1f}% steal.")
    if disturbed:
        text += (f" In {disturbed} of {rounds} rounds a thread ran faster beside the others than alone: the host "
                 "slowed it while it ran alone, and its pace together stood in for its pace alone there.")
    if (short or spread > 1.2) and steal < 0.01:
        text += (" The host ran other work beside this machine's CPUs that it does not report: runs of several "
                 "ranks (which wait for the slowest) vary with it the most, and their comparisons with them.")
    return [text, ""]


def markdown(rows: list[dict], images: list[tuple[str, str]], calibrated_on: str | None, title: str,
             out_dir: str, probes: list[str] | None = None) -> str:
    lines = [f"# {title}", ""]
    if calibrated_on:
        lines += [f"Calibrated on: {calibrated_on}. The configurations below were held out of the fit.", ""]
    busy = [r for r in rows if r["verdict"] == "not meaningful"]
    if busy:
        shares = ", ".join(f"{r['name']}: {100 * (r['noise']['other_share'] + r['noise']['steal_share']):.0f}%"
                           for r in busy)
        lines += [f"**{len(busy)} of {len(rows)} comparisons are not meaningful: the machine was busy while they ran** "
                  f"(share of its CPU taken by other processes and the hypervisor: {shares}). Their errors say as much "
                  "about that load as about the model: they are left out of the figures below. Measure again on a "
                  "quiet machine.", ""]
    lines += ["| configuration | predicted step | measured step (95%) | error | verdict | others' CPU "
              "| the same work's CPU time over the runs | bubble predicted / measured (95%) | bubble error "
              "| bubble verdict | worst stash error |",
              "|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        stash = "n/a" if r["stash_worst"] is None else f"{100 * r['stash_worst']:.1f}%"
        n = r["noise"]
        known = f" ±{100 * r['known']:.1f}%" if r["known"] else ""
        known += f" ({r['runs']} runs)" if r["runs"] > 1 else ""
        others = f"{100 * (n['other_share'] + n['steal_share']):.1f}%" if n else "not recorded"
        pace = "not recorded" if r.get("pace_spread") is None else f"{100 * r['pace_spread']:.0f}% apart"
        bubble_known = f" ±{r['bubble_known']:.1f} pt" if r["bubble_known"] is not None else ""
        lines.append(f"| {r['name']} | {1e3 * r['predicted']:.1f} ms | {1e3 * r['measured']:.1f} ms{known} | "
                     f"{100 * r['error']:+.1f}% | {r['verdict']} | {others} | {pace} | "
                     f"{100 * r['bubble_predicted']:.1f}% / {100 * r['bubble_measured']:.1f}%{bubble_known} | "
                     f"{r['bubble_points']:+.1f} pt | {r['bubble_verdict']} | {stash} |")
    kept = [r for r in rows if r["verdict"] != "not meaningful"]
    if not kept:
        lines += ["", "No comparison is meaningful: every run was measured on a busy machine.", ""]
    else:
        errors = [abs(r["error"]) for r in kept]
        bubbles = [abs(r["bubble_points"]) for r in kept]
        stashes = [r["stash_worst"] for r in kept if r["stash_worst"] is not None]
        within = sum(r["verdict"] == "within noise" for r in kept)
        bubbles_within = sum(r["bubble_verdict"] == "within noise" for r in kept)
        judged = sum(r["bubble_verdict"] in ("within noise", "model error") for r in kept)
        lines += ["", f"Step time: median |error| {100 * median(errors):.1f}%, worst {100 * max(errors):.1f}% "
                      f"over {len(kept)} held-out configurations ({within} within their measurement's noise). Bubble: "
                      f"median |error| {median(bubbles):.1f} points, worst {max(bubbles):.1f}"
                      + (f" ({bubbles_within} of {judged} within how far the bubble moves from run to run)."
                         if judged else ".")
                  + (f" Peak stash per stage: worst {100 * max(stashes):.1f}%." if stashes else ""), ""]
        lines += noise_alone_line(kept)
        lines += pace_line(kept)
        lines += shared_cores_line(kept)
    lines += probe_line(probes or [])
    for caption, path in images:
        rel = os.path.relpath(path, out_dir)
        lines += [f"## {caption}", "", f"![{caption}]({rel})", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    p = parser(__file__, __doc__.splitlines()[0])
    p.add_argument("--compare", nargs="+", required=True, help="pipetwin compare --json reports")
    p.add_argument("--image", action="append", default=[], help="CAPTION=PATH of a picture to include")
    p.add_argument("--calibrated-on", help="what the calibration was fitted on, in words")
    p.add_argument("--probe", nargs="+", default=[], help="pipetwin probe --json outputs (the host's cores)")
    a = p.parse_args(argv)
    rows = [row(path) for path in a.compare]
    images = []
    for spec in a.image:
        caption, sep, path = spec.partition("=")
        if not sep or not path:
            raise PlotError(f"--image '{spec}': expected CAPTION=PATH")
        if not os.path.exists(path):
            raise PlotError(f"{path}: no such file")
        images.append((caption, path))
    out = a.out + ".md"
    text = markdown(rows, images, a.calibrated_on, a.title or "pipetwin: predicted against measured",
                    os.path.dirname(os.path.abspath(out)), a.probe)
    write_text(out, text + "\n")
    print(out)


if __name__ == "__main__":
    run_main(__file__, main)
