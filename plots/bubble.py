"""Bubble fraction against the number of micro-batches M, one colour per K:
the simulated values of a sweep (`pipetwin sweep --out results.csv`, solid),
the closed form (K-1)/(M+K-1) of fill-drain schedules (dashed), and measured
points from `pipetwin run` (its --json/--summary output or its --trace) when
given (large hollow markers).

    bubble.py SWEEP.csv [--measured RUN.json ...] [--schedule S] [--recompute R]
              [--microbatch-size B] --out PREFIX
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def simulated_series(sel: common.Selection) -> dict[int, list[tuple[int, float]]]:
    """K -> [(M, bubble)] sorted by M, for the rows that ran."""
    series: dict[int, list[tuple[int, float]]] = {}
    for r in sel.rows:
        if common.finite(r["bubble_fraction"]):
            series.setdefault(r["ranks"], []).append((r["microbatches"], r["bubble_fraction"]))
    for pts in series.values():
        pts.sort()
    return dict(sorted(series.items()))


def analytic_series(k: int, ms) -> list[tuple[int, float]]:
    return [(m, common.analytic_bubble(k, m)) for m in sorted(set(ms))]


def measured_point(path: str, sel: common.Selection | None) -> tuple[int, int, float]:
    """(K, M, bubble) of one measured run; refuses a run of another schedule."""
    doc = common.load_summary(path)
    for field in ("ranks", "microbatches", "schedule"):
        if field not in doc:
            raise common.PlotError(f"{path}: no field '{field}' (expected `pipetwin run --json` output or a trace)")
    if sel is not None:
        wanted = {"schedule": sel.schedule, "recompute": sel.recompute}
        if sel.microbatch_size is None:
            wanted["batch"] = sel.batch
        else:
            wanted["microbatch_size"] = sel.microbatch_size
        for field, value in wanted.items():
            if field in doc and doc[field] != value:
                raise common.PlotError(f"{path}: field '{field}' is {doc[field]!r} but the plotted sweep rows have "
                                       f"{value!r} (choose them with --{field.replace('_', '-')})")
    # The median of the run's steps where it recorded each step's (the
    # warm-up left out), as calibrate reads it; else its summary's one step.
    try:
        recorded = common.recorded_bubble(doc)
    except common.PlotError as e:
        raise common.PlotError(f"{path}: {e}") from None
    if recorded is not None:
        return int(doc["ranks"]), int(doc["microbatches"]), recorded[0]
    summary = doc.get("summary") or {}
    bubble = summary.get("bubble_fraction")
    if not isinstance(bubble, (int, float)):
        if "_trace" not in doc:
            raise common.PlotError(f"{path}: no field 'summary.bubble_fraction'")
        bubble = doc["_trace"].bubble()
    return int(doc["ranks"]), int(doc["microbatches"]), float(bubble)


def draw(sel: common.Selection, measured: list[tuple[int, int, float]], title: str | None):
    plt = common.setup_matplotlib()
    from matplotlib.lines import Line2D

    series = simulated_series(sel)
    ks = sorted(set(series) | {k for k, _, _ in measured})
    ms = sorted({r["microbatches"] for r in sel.rows} | {m for _, m, _ in measured})
    colours = plt.get_cmap("tab10")
    colour = {k: colours(i % 10) for i, k in enumerate(ks)}
    fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    for k in ks:
        if k in series:
            xs, ys = zip(*series[k])
            ax.plot(xs, [100 * y for y in ys], "-o", color=colour[k], markersize=4, linewidth=1.6)
        xs, ys = zip(*analytic_series(k, ms))
        ax.plot(xs, [100 * y for y in ys], "--", color=colour[k], linewidth=1.0, alpha=0.8)
    for k, m, b in measured:
        ax.plot([m], [100 * b], "D", markersize=9, markerfacecolor="none", markeredgewidth=1.8, color=colour[k])
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.minorticks_off()
    ax.set_xlabel("micro-batches M")
    ax.set_ylabel("bubble fraction (% of the step idle, mean over ranks)")
    top = max([100 * y for pts in series.values() for _, y in pts] + [100 * b for _, _, b in measured] +
              [100 * common.analytic_bubble(k, ms[0]) for k in ks] + [1.0])
    ax.set_ylim(0, min(100, top * 1.12 + 1))
    ax.grid(color="#dddddd", linewidth=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = [Line2D([], [], color=colour[k], linewidth=2.5, label=f"K = {k}") for k in ks]
    handles += [Line2D([], [], color="#444444", marker="o", markersize=4, label="simulated (sweep)"),
                Line2D([], [], color="#444444", linestyle="--", label="(K−1)/(M+K−1)")]
    if measured:
        handles.append(Line2D([], [], color="#444444", marker="D", linestyle="none", markerfacecolor="none",
                              markersize=8, markeredgewidth=1.6, label="measured (pipetwin run)"))
    ax.legend(handles=handles, loc="upper right", frameon=False)
    ax.set_title(title or f"Bubble against micro-batches: {sel.describe()}")
    return fig


def main(argv):
    p = common.parser(__file__, __doc__.split("\n\n")[0])
    p.add_argument("sweep", help="results CSV of pipetwin sweep")
    p.add_argument("--measured", nargs="+", default=[], metavar="RUN",
                   help="pipetwin run --json outputs or --trace files")
    p.add_argument("--schedule", help="which schedule of the sweep (default: its first)")
    p.add_argument("--recompute", help="which recompute policy (default: the sweep's first)")
    p.add_argument("--microbatch-size", type=float, help="which micro-batch size (default: the sweep's first)")
    p.add_argument("--batch", type=float, help="instead, the rows of this mini-batch (a sweep run with --batch)")
    args = p.parse_args(argv)
    sel = common.select_rows(common.load_sweep(args.sweep), args.sweep, args.schedule, args.recompute,
                             args.microbatch_size, args.batch)
    if not simulated_series(sel):
        raise common.PlotError(f"{args.sweep}: no {sel.describe()} row ran (every one is an error)")
    measured = [measured_point(x, sel) for x in args.measured]
    fig = draw(sel, measured, args.title)
    for path in common.save_figure(fig, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    common.run_main(__file__, main)
