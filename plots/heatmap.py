"""Heatmap of a sweep (`pipetwin sweep --out results.csv`): one metric
(throughput, step time, bubble fraction or peak stage memory) over K (rows)
x M (columns) for one schedule, each cell annotated with its value; cells
that do not fit in memory say OOM, cells that could not run are grey.
Brighter is better for every metric.

    heatmap.py SWEEP.csv [--metric throughput|step_time|bubble|memory]
               [--schedule S] [--recompute R] [--microbatch-size B] --out PREFIX
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# metric -> (CSV column, label, scale, higher is better)
METRICS = {
    "throughput": ("throughput_samples_per_s", "throughput (samples/s)", 1.0, True),
    "step_time": ("step_time_s", "step time (s)", 1.0, False),
    "bubble": ("bubble_fraction", "bubble fraction (%)", 100.0, False),
    "memory": ("max_stage_memory_gb", "peak memory of the fullest stage (GB)", 1.0, False),
}


def grid_of(sel: common.Selection, metric: str):
    """(ks, ms, cells): cells[(K, M)] = (value or None, status) for each row of the selection."""
    column, _, scale, _ = METRICS[metric]
    ks = sorted({r["ranks"] for r in sel.rows})
    ms = sorted({r["microbatches"] for r in sel.rows})
    cells = {}
    for r in sel.rows:
        v = r[column]
        cells[(r["ranks"], r["microbatches"])] = (v * scale if common.finite(v) else None, r["status"])
    return ks, ms, cells


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def draw(sel: common.Selection, metric: str, title: str | None):
    plt = common.setup_matplotlib()
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    column, label, scale, higher_better = METRICS[metric]
    ks, ms, cells = grid_of(sel, metric)
    if metric == "step_time":
        span = max((v for v, _ in cells.values() if v is not None), default=1.0)
        tscale, unit = common.time_unit(span)
        cells = {key: (None if v is None else v * tscale, st) for key, (v, st) in cells.items()}
        label = f"step time ({unit})"
    grid = np.full((len(ks), len(ms)), np.nan)
    for (k, m), (v, _) in cells.items():
        if v is not None:
            grid[ks.index(k), ms.index(m)] = v
    finite = grid[np.isfinite(grid)]
    if finite.size == 0:
        raise common.PlotError(f"no {sel.describe()} row of the sweep has a {column}")
    lo, hi = float(finite.min()), float(finite.max())
    log = metric != "bubble" and lo > 0 and hi / lo > 20
    norm = LogNorm(lo, hi) if log else Normalize(lo, hi if hi > lo else lo + 1)
    cmap = plt.get_cmap("viridis" if higher_better else "viridis_r").copy()
    cmap.set_bad("#e0e0e0")
    fig, ax = plt.subplots(figsize=(1.6 + 0.95 * len(ms), 1.5 + 0.55 * len(ks)), layout="constrained")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto")
    for (k, m), (v, status) in cells.items():
        i, j = ks.index(k), ms.index(m)
        if v is None:
            text, colour = ("OOM" if status == "oom" else "n/a"), ("#b2182b" if status == "oom" else "#666666")
        else:
            r, g, b, _ = cmap(norm(v))
            colour = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            text = fmt(v) + ("\nOOM" if status == "oom" else "")
        ax.text(j, i, text, ha="center", va="center", fontsize=8, color=colour)
    ax.set_xticks(range(len(ms)), [str(m) for m in ms])
    ax.set_yticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("micro-batches M")
    ax.set_ylabel("ranks K")
    ax.set_xticks(np.arange(-0.5, len(ms)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(ks)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="both", length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    bar = fig.colorbar(im, ax=ax, shrink=0.9)
    if log:  # plain numbers at 1, 2, 5 x 10^n rather than powers of ten
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        bar.ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
        bar.ax.yaxis.set_minor_formatter(NullFormatter())
    bar.set_label(label)
    ax.set_title(title or f"{label.split(' (')[0].capitalize()} over K × M\n{sel.describe()}")
    return fig


def main(argv):
    p = common.parser(__file__, __doc__.split("\n\n")[0])
    p.add_argument("sweep", help="results CSV of pipetwin sweep")
    p.add_argument("--metric", default="throughput", choices=sorted(METRICS))
    p.add_argument("--schedule", help="which schedule of the sweep (default: its first)")
    p.add_argument("--recompute", help="which recompute policy (default: the sweep's first)")
    p.add_argument("--microbatch-size", type=float, help="which micro-batch size (default: the sweep's first)")
    p.add_argument("--batch", type=float, help="instead, the rows of this mini-batch (a sweep run with --batch)")
    args = p.parse_args(argv)
    sel = common.select_rows(common.load_sweep(args.sweep), args.sweep, args.schedule, args.recompute,
                             args.microbatch_size, args.batch)
    if all(v is None for v, _ in grid_of(sel, args.metric)[2].values()):
        raise common.PlotError(f"{args.sweep}: no {sel.describe()} row has a {METRICS[args.metric][0]}")
    fig = draw(sel, args.metric, args.title)
    for path in common.save_figure(fig, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    common.run_main(__file__, main)
