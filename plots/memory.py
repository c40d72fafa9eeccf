"""Peak memory of every pipeline stage against the device's capacity, from a
trace (`pipetwin simulate --trace` or `pipetwin run --trace`) or a JSON
summary (`pipetwin simulate --json`, `pipetwin run --json` or `--summary`);
beside it, where a rank holds several stages (interleaved and V-shaped
schedules), every rank's peak: its stages' memory together, which may overflow
the device while each stage alone fits.
Each stage's predicted peak is split into its static part (weights, gradients,
optimizer state) and its stashed activations when the file records the IR's
stash; a measured run adds, per stage, the peak LibTorch allocated on its rank
(V = 1) and a marker at static + measured stash. The capacity is a red dashed
line, or a note when it is far above every bar; each stage is labelled with
its share of the capacity.

    memory.py TRACE_OR_SUMMARY.json --out PREFIX
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


@dataclass
class StageMemory:
    stage: int
    peak: float  # predicted peak bytes (static + stash)
    capacity: float
    stash: float | None  # predicted stash bytes (the IR's accounting)
    measured_stash: float | None
    measured_allocated: float | None  # peak allocated on the stage's rank (V = 1 only)

    @property
    def static(self) -> float | None:
        return None if self.stash is None else self.peak - self.stash


def stage_memory(doc: dict, path: str) -> list[StageMemory]:
    summary = doc.get("summary")
    if not isinstance(summary, dict) or not isinstance(summary.get("memory_per_stage"), list):
        raise common.PlotError(f"{path}: no field 'summary.memory_per_stage'")
    per_stage = summary["memory_per_stage"]
    measured = doc.get("measured") if isinstance(doc.get("measured"), dict) else {}
    m_stages = measured.get("stages") if isinstance(measured.get("stages"), list) else []
    m_ranks = measured.get("ranks") if isinstance(measured.get("ranks"), list) else []
    predicted_stash = doc.get("predicted_stash_bytes_per_stage")
    if not isinstance(predicted_stash, list):
        predicted_stash = [s.get("predicted_peak_stash_bytes") for s in m_stages] if m_stages else None
    if predicted_stash is not None and len(predicted_stash) != len(per_stage):
        raise common.PlotError(f"{path}: {len(predicted_stash)} predicted stash values for {len(per_stage)} stages")
    if m_stages and len(m_stages) != len(per_stage):
        raise common.PlotError(f"{path}: field 'measured.stages' has {len(m_stages)} stages, "
                               f"'summary.memory_per_stage' {len(per_stage)}")
    one_stage_per_rank = doc.get("stages_per_rank", 1) == 1 and len(m_ranks) == len(per_stage)
    out = []
    for s, entry in enumerate(per_stage):
        peak, cap = entry.get("peak_bytes"), entry.get("capacity_bytes")
        if not isinstance(peak, (int, float)) or not isinstance(cap, (int, float)):
            raise common.PlotError(f"{path}: summary.memory_per_stage[{s}] lacks 'peak_bytes' or 'capacity_bytes'")
        stash = predicted_stash[s] if predicted_stash is not None else None
        out.append(StageMemory(
            s, float(peak), float(cap), None if stash is None else float(stash),
            float(m_stages[s]["peak_stash_bytes"]) if m_stages and "peak_stash_bytes" in m_stages[s] else None,
            float(m_ranks[s]["peak_allocated_bytes"]) if one_stage_per_rank and "peak_allocated_bytes" in m_ranks[s]
            else None))
    if not out:
        raise common.PlotError(f"{path}: 'summary.memory_per_stage' is empty")
    return out


@dataclass
class RankMemory:
    rank: int
    peak: float  # predicted peak bytes of its stages together
    capacity: float
    stages: int
    stage_ids: list[int] | None = None  # which, where a trace says (its actions' stages)

    @property
    def label(self) -> str:
        if self.stage_ids and len(self.stage_ids) == self.stages:
            return f"rank {self.rank}\nstages {', '.join(map(str, self.stage_ids))}"
        return f"rank {self.rank}\n{self.stages} stages"


def rank_memory(doc: dict, path: str) -> list[RankMemory]:
    """summary.memory_per_rank: empty where each rank holds one stage (the summary has none)."""
    per_rank = doc.get("summary", {}).get("memory_per_rank")
    if per_rank is None:
        return []
    if not isinstance(per_rank, list):
        raise common.PlotError(f"{path}: field 'summary.memory_per_rank' is not a list")
    trace = doc.get("_trace")
    out = []
    for r, entry in enumerate(per_rank):
        peak, cap = entry.get("peak_bytes"), entry.get("capacity_bytes")
        if not isinstance(peak, (int, float)) or not isinstance(cap, (int, float)):
            raise common.PlotError(f"{path}: summary.memory_per_rank[{r}] lacks 'peak_bytes' or 'capacity_bytes'")
        ids = sorted({a.stage for a in trace.actions if a.rank == r}) if trace is not None else None
        out.append(RankMemory(r, float(peak), float(cap), int(entry.get("stages", 1)), ids))
    return out


def share_label(peak: float, capacity: float) -> tuple[str, bool]:
    """The label above a bar: its share of the capacity, or OOM; and whether it is over."""
    share = 100 * peak / capacity if capacity > 0 else float("inf")
    text = f"{share:.2g}% of {common.fmt_bytes(capacity)}" if share < 100 else f"{share:.0f}%: OOM"
    return text, share > 100


def byte_unit(b: float) -> tuple[float, str]:
    return (1e9, "GB") if b >= 1e9 else (1e6, "MB") if b >= 1e6 else (1e3, "kB")


def draw(stages: list[StageMemory], doc: dict, path: str, title: str | None, ranks: list[RankMemory] | None = None):
    plt = common.setup_matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    measured = any(s.measured_allocated is not None for s in stages)
    ranks = ranks or []
    tallest = max(max(s.peak, s.measured_allocated or 0, (s.static or 0) + (s.measured_stash or 0)) for s in stages)
    tallest = max([tallest] + [r.peak for r in ranks])
    cap_max = max([s.capacity for s in stages] + [r.capacity for r in ranks])
    capacity_on_scale = cap_max <= 3 * tallest
    top = max(tallest, cap_max) if capacity_on_scale else tallest
    div, unit = byte_unit(top)
    n = len(stages)
    width = max(7.0, 1.2 + 0.9 * n * (1.6 if measured else 1))
    if ranks:
        fig, (ax, rax) = plt.subplots(1, 2, sharey=True, figsize=(width + 1.2 + 0.9 * len(ranks), 4.4),
                                      layout="constrained", gridspec_kw={"width_ratios": [n, max(2, len(ranks))]})
    else:
        fig, ax = plt.subplots(figsize=(width, 4.4), layout="constrained")
    w = 0.38 if measured else 0.6
    off = -0.2 if measured else 0.0
    xs = [s.stage + off for s in stages]
    handles = []
    if all(s.stash is not None for s in stages):
        ax.bar(xs, [s.static / div for s in stages], w, color="#9ecae1")
        ax.bar(xs, [s.stash / div for s in stages], w, bottom=[s.static / div for s in stages], color="#0072B2")
        handles += [Patch(color="#9ecae1", label="weights, gradients, optimizer state (predicted)"),
                    Patch(color="#0072B2", label="stashed activations (predicted)")]
    else:
        ax.bar(xs, [s.peak / div for s in stages], w, color="#0072B2")
        handles.append(Patch(color="#0072B2", label="peak (predicted)"))
    if measured:
        ax.bar([s.stage + 0.2 for s in stages], [(s.measured_allocated or 0) / div for s in stages], w,
               color="#E69F00")
        handles.append(Patch(color="#E69F00", label="peak allocated by LibTorch on the rank (measured)"))
    marks = [(s.stage + off, ((s.static or 0) + s.measured_stash) / div) for s in stages
             if s.measured_stash is not None and s.static is not None]
    if marks:
        ax.plot(*zip(*marks), linestyle="none", marker="_", markersize=26 if measured else 40, markeredgewidth=2.2,
                color="black")
        handles.append(Line2D([], [], color="black", marker="_", linestyle="none", markersize=14, markeredgewidth=2.2,
                              label="static + measured stash"))
    if capacity_on_scale:
        for s in stages:
            ax.plot([s.stage - 0.45, s.stage + 0.45], [s.capacity / div] * 2, color="#b2182b", linestyle="--",
                    linewidth=1.5)
        handles.append(Line2D([], [], color="#b2182b", linestyle="--", label="capacity"))
    # Share of the capacity above each stage.
    for s in stages:
        height = max(s.peak, s.measured_allocated or 0) / div
        text, over = share_label(max(s.peak, s.measured_allocated or 0), s.capacity)
        ax.annotate(text, (s.stage, height), xytext=(0, 4), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7.5, color="#b2182b" if over else "#333333")
    ax.set_xticks([s.stage for s in stages], [f"stage {s.stage}" for s in stages])
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(0, top / div * 1.18)
    ax.set_ylabel(f"peak memory ({unit})")
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if not capacity_on_scale:
        handles.append(Line2D([], [], color="#b2182b", linestyle="--",
                              label=f"capacity {common.fmt_bytes(cap_max)}: far above the bars, off the scale"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False, fontsize=8)
    what = common.TraceMeta(doc).describe() or os.path.basename(path)
    hw = doc.get("hardware")
    if ranks:
        draw_ranks(rax, ranks, div, capacity_on_scale)
        ax.set_title("per stage", fontsize=9)
        fig.suptitle(title or f"Peak memory per stage and per rank against capacity\n{what}" + (f" on {hw}" if hw else ""))
    else:
        ax.set_title(title or f"Peak memory per stage against capacity\n{what}" + (f" on {hw}" if hw else ""))
    return fig


def draw_ranks(ax, ranks: list[RankMemory], div: float, capacity_on_scale: bool):
    """Each rank's peak, its stages together, against its capacity."""
    ax.bar([r.rank for r in ranks], [r.peak / div for r in ranks], 0.6, color="#CC79A7")
    for r in ranks:
        if capacity_on_scale:
            ax.plot([r.rank - 0.45, r.rank + 0.45], [r.capacity / div] * 2, color="#b2182b", linestyle="--",
                    linewidth=1.5)
        text, over = share_label(r.peak, r.capacity)
        ax.annotate(text, (r.rank, r.peak / div), xytext=(0, 4), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7.5, color="#b2182b" if over else "#333333")
    ax.set_xticks([r.rank for r in ranks], [r.label for r in ranks])
    ax.set_xlim(-0.6, max(2, len(ranks)) - 0.4)
    ax.set_title("per rank: its stages together", fontsize=9)
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def main(argv):
    p = common.parser(__file__, __doc__.split("\n\n")[0])
    p.add_argument("input", help="a trace or a JSON summary of pipetwin simulate/run")
    args = p.parse_args(argv)
    doc = common.load_summary(args.input)
    stages = stage_memory(doc, args.input)
    fig = draw(stages, doc, args.input, args.title, rank_memory(doc, args.input))
    for path in common.save_figure(fig, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    common.run_main(__file__, main)
