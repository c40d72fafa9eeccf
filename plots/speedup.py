"""Normalised training throughput, like Table 2 of the GPipe paper: one row per
number of partitions K (2, 4, 8), one column per number of micro-batches M
(1, 4, 32), each cell the throughput (samples/s) of that configuration in a
sweep (`pipetwin sweep --out results.csv`) divided by the throughput at
K=2, M=1. Several sweeps (e.g. two models) give side-by-side tables. Writes
the picture (PREFIX.png, PREFIX.svg) and the same table as Markdown (PREFIX.md).

    speedup.py SWEEP.csv [SWEEP2.csv ...] [--labels A,B] [--schedule S]
               [--ranks 2,4,8] [--microbatches 1,4,32] --out PREFIX
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise common.PlotError(f"'{text}': expected comma-separated integers") from None
    if not values or any(v <= 0 for v in values):
        raise common.PlotError(f"'{text}': expected positive integers")
    return values


def speedup_table(sel: common.Selection, path: str, ks: list[int], ms: list[int]):
    """(cells, baseline): cells[(K, M)] is the normalised throughput, or 'OOM',
    'error' or None (no row); the baseline is the (ks[0], ms[0]) throughput."""
    rows = {(r["ranks"], r["microbatches"]): r for r in sel.rows}
    base_key = (ks[0], ms[0])
    base = rows.get(base_key)
    if base is None or not common.finite(base["throughput_samples_per_s"]) or base["throughput_samples_per_s"] <= 0:
        why = "no row" if base is None else f"its row is '{base['status']}'"
        raise common.PlotError(f"{path}: the baseline K={ks[0]} M={ms[0]} ({sel.describe()}) has no throughput "
                               f"({why}); it normalises the table")
    baseline = base["throughput_samples_per_s"]
    cells = {}
    for k in ks:
        for m in ms:
            r = rows.get((k, m))
            if r is None:
                cells[(k, m)] = None
            elif r["status"] == "oom":
                cells[(k, m)] = "OOM"
            elif not common.finite(r["throughput_samples_per_s"]):
                cells[(k, m)] = "error"
            else:
                cells[(k, m)] = r["throughput_samples_per_s"] / baseline
    return cells, baseline


def cell_text(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{v:.2f}"


def markdown(tables, ks, ms, title: str) -> str:
    out = [f"# {title}", ""]
    for label, sel, cells, baseline in tables:
        if len(tables) > 1:
            out += [f"## {label}", ""]
        out.append(f"{sel.describe()}; throughput divided by that of K={ks[0]}, M={ms[0]} "
                   f"({baseline:.4g} samples/s). OOM: does not fit in memory; —: not in the sweep.")
        out.append("")
        out.append("| | " + " | ".join(f"M = {m}" for m in ms) + " |")
        out.append("|---|" + "---:|" * len(ms))
        for k in ks:
            out.append(f"| **K = {k}** | " + " | ".join(cell_text(cells[(k, m)]) for m in ms) + " |")
        out.append("")
    return "\n".join(out)


def draw(tables, ks, ms, title: str):
    plt = common.setup_matplotlib()
    import numpy as np
    from matplotlib.colors import LogNorm

    values = [v for _, _, cells, _ in tables for v in cells.values() if isinstance(v, float)]
    lo, hi = min(values), max(values)
    if hi / lo < 1.05:
        lo, hi = lo / 1.05, hi * 1.05
    norm = LogNorm(vmin=lo, vmax=hi)
    cmap = plt.get_cmap("Blues")
    n = len(tables)
    fig, axes = plt.subplots(1, n, figsize=(1.1 + 1.05 * len(ms) * n + 0.5 * (n - 1), 0.9 + 0.5 * len(ks)),
                             squeeze=False, layout="constrained")
    for ax, (label, sel, cells, baseline) in zip(axes[0], tables):
        grid = np.full((len(ks), len(ms)), np.nan)
        for i, k in enumerate(ks):
            for j, m in enumerate(ms):
                v = cells[(k, m)]
                if isinstance(v, float):
                    grid[i, j] = v
        # Colours kept light (0.05 .. 0.6 of the map) so that dark text reads on every cell.
        shade = np.where(np.isnan(grid), np.nan, 0.05 + 0.55 * norm(np.nan_to_num(grid, nan=lo)))
        ax.imshow(np.ma.masked_invalid(shade), cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for i, k in enumerate(ks):
            for j, m in enumerate(ms):
                v = cells[(k, m)]
                bold = isinstance(v, float) and math.isclose(v, 1.0) and (k, m) == (ks[0], ms[0])
                ax.text(j, i, cell_text(v), ha="center", va="center", fontsize=11,
                        fontweight="bold" if bold else "normal", color="#b2182b" if v == "OOM" else "#111111")
        ax.set_xticks(range(len(ms)), [f"M = {m}" for m in ms])
        ax.set_yticks(range(len(ks)), [f"K = {k}" for k in ks])
        ax.xaxis.tick_top()
        ax.tick_params(which="both", length=0)
        ax.set_xticks(np.arange(-0.5, len(ms)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(ks)), minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(f"{label}\n{sel.describe()}" if n > 1 else sel.describe(), fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.supxlabel(f"throughput normalised to K={ks[0]}, M={ms[0]}", fontsize=8, color="#555555")
    return fig


def main(argv):
    p = common.parser(__file__, __doc__.split("\n\n")[0])
    p.add_argument("sweeps", nargs="+", help="results CSVs of pipetwin sweep")
    p.add_argument("--labels", help="a name per sweep, comma-separated (default: the file names)")
    p.add_argument("--schedule", help="which schedule of each sweep (default: its first)")
    p.add_argument("--recompute", help="which recompute policy (default: each sweep's first)")
    p.add_argument("--microbatch-size", type=float, help="which micro-batch size (default: each sweep's first)")
    p.add_argument("--ranks", default="2,4,8", help="rows: K values (the first is the baseline)")
    p.add_argument("--microbatches", default="1,4,32", help="columns: M values (the first is the baseline)")
    args = p.parse_args(argv)
    ks, ms = int_list(args.ranks), int_list(args.microbatches)
    labels = args.labels.split(",") if args.labels else [os.path.splitext(os.path.basename(x))[0] for x in args.sweeps]
    if len(labels) != len(args.sweeps):
        raise common.PlotError(f"--labels '{args.labels}': {len(args.sweeps)} names needed, one per sweep")
    tables = []
    for label, path in zip(labels, args.sweeps):
        sel = common.select_rows(common.load_sweep(path), path, args.schedule, args.recompute, args.microbatch_size)
        cells, baseline = speedup_table(sel, path, ks, ms)
        tables.append((label, sel, cells, baseline))
    title = args.title or "Normalised training throughput (GPipe Table 2 style)"
    fig = draw(tables, ks, ms, title)
    for path in common.save_figure(fig, args.out):
        print(f"wrote {path}")
    common.write_text(f"{args.out}.md", markdown(tables, ks, ms, title))
    print(f"wrote {args.out}.md")


if __name__ == "__main__":
    common.run_main(__file__, main)
