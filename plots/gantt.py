"""Gantt timelines of one pipeline step: ranks x time, one bar per action,
coloured by kind (F, B, I, W, R, optimizer step, activation and gradient
transfers), from Chrome traces written by `pipetwin simulate --trace`
(predicted) and `pipetwin run --trace` (measured). With two traces the first
is drawn above the second on a shared time axis, so the same action sits at
the same height in both; each title gives its step time and bubble.

    gantt.py PREDICTED.json [MEASURED.json] --out PREFIX
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Each rank is one unit of height: the compute lane on top, then sends, then receives.
LANES = {"compute": (0.04, 0.52), "send": (0.60, 0.14), "recv": (0.76, 0.14)}


@dataclass(frozen=True)
class Bar:
    rank: int
    lane: str  # compute | send | recv
    kind: str  # the colour key: F B I W R STEP REDUCE_GRAD SEND_F RECV_F SEND_B RECV_B UNSHARD RESHARD
    start: float  # seconds
    duration: float
    label: str  # the micro-batch, shown inside wide enough compute bars

    @property
    def y(self) -> float:
        return self.rank + LANES[self.lane][0]

    @property
    def height(self) -> float:
        return LANES[self.lane][1]


def lane_of(op: str) -> str:
    if op.startswith("SEND"):
        return "send"
    if op.startswith("RECV") or op == "UNSHARD":  # an UNSHARD's gather brings weights in, beside the compute
        return "recv"
    return "compute"


def gantt_bars(trace: common.Trace) -> list[Bar]:
    """The bars of a trace, in seconds from the trace's own origin."""
    bars = []
    for a in trace.actions:
        label = "" if a.microbatch is None else str(a.microbatch)
        if a.op == "STEP":
            label = "S"
        bars.append(Bar(a.rank, lane_of(a.op), a.op, a.start, a.duration, label))
    return bars


def panel_title(label: str, trace: common.Trace) -> str:
    info = trace.info
    engine = "" if info.engine == "measured" else info.engine
    source = ", ".join(x for x in (info.producer, engine) if x)
    if info.device:
        source += f" on {info.device}"
    head = f"{label} ({source})" if source else label
    text = f"{head}: step {common.fmt_time(trace.step_time())}, bubble {100 * trace.bubble():.1f}%"
    # A run that recorded every step's bubble: their median too (the warm-up
    # left out), the figure calibrate and compare read.
    try:
        recorded = info.recorded_bubble()
    except common.PlotError as e:
        raise common.PlotError(f"{trace.path}: {e}") from None
    if recorded is not None and recorded[1] > 1:
        text += f" (the median of its {recorded[1]} steps: {100 * recorded[0]:.1f}%)"
    return text


def draw(traces: list[tuple[str, common.Trace]], title: str | None = None):
    plt = common.setup_matplotlib()
    from matplotlib.patches import Patch

    k = max(t.ranks for _, t in traces)
    span = max(t.step_time() for _, t in traces)
    scale, unit = common.time_unit(span)
    height = 0.42 * k + 1.1
    fig, axes = plt.subplots(len(traces), 1, sharex=True, squeeze=False,
                             figsize=(12, height * len(traces) + 0.9), layout="constrained")
    axes = axes[:, 0]
    kinds_seen = []
    width_in = 12 * 0.88  # the axes' width, roughly, for the labels' fit test
    for ax, (label, trace) in zip(axes, traces):
        bars = gantt_bars(trace)
        groups: dict[tuple, list] = {}
        for b in bars:
            groups.setdefault((b.rank, b.lane, b.kind), []).append((b.start * scale, b.duration * scale))
            key = "SEND_F" if b.kind == "RECV_F" else "SEND_B" if b.kind == "RECV_B" else b.kind
            if key not in kinds_seen:
                kinds_seen.append(key)
        for (rank, lane, kind), spans in groups.items():
            y0, h = LANES[lane]
            ax.broken_barh(spans, (rank + y0, h), facecolors=common.OP_COLORS[kind],
                           edgecolor="white" if lane == "compute" else "none", linewidth=0.4)
        # Micro-batch numbers inside the compute bars that are wide enough for them.
        for b in bars:
            if b.lane != "compute" or not b.label:
                continue
            width_pt = b.duration / span * width_in * 72 if span > 0 else 0
            if width_pt >= 5.5 * len(b.label) + 2:
                ax.text((b.start + b.duration / 2) * scale, b.y + b.height / 2, b.label, ha="center", va="center",
                        fontsize=6.5, color="white" if b.kind != "I" else "black", clip_on=True)
        step = trace.step_time() * scale
        ax.axvline(step, color="#555555", linestyle="--", linewidth=0.8)
        ax.set_ylim(k, 0)
        mid = {lane: y0 + h / 2 for lane, (y0, h) in LANES.items()}
        ax.set_yticks([r + mid["compute"] for r in range(k)], [f"rank {r}" for r in range(k)])
        ax.set_yticks([r + mid[lane] for r in range(k) for lane in ("send", "recv")],
                      ["send", "recv"] * k, minor=True)
        ax.tick_params(axis="y", which="both", length=0)
        ax.tick_params(axis="y", which="minor", labelsize=6.5, labelcolor="#777777")
        ax.set_title(panel_title(label, trace), loc="left")
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    axes[-1].set_xlim(0, span * scale * 1.01)
    axes[-1].set_xlabel(f"time ({unit}); per rank: compute, then sends, then receives; dashed: end of the step")
    order = ["F", "B", "I", "W", "R", "STEP", "REDUCE_GRAD", "UNSHARD", "SEND_F", "SEND_B"]
    handles = [Patch(facecolor=common.OP_COLORS[kd], label=common.OP_LABELS[kd]) for kd in order if kd in kinds_seen]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False)
    meta = traces[0][1].meta  # otherData, read through common.TraceMeta
    fig.suptitle(title or common.TraceMeta(meta).describe() or os.path.basename(traces[0][1].path), fontsize=11)
    return fig


def main(argv):
    p = common.parser(__file__, __doc__.split("\n\n")[0])
    p.add_argument("predicted", help="predicted trace (pipetwin simulate --trace)")
    p.add_argument("measured", nargs="?", help="measured trace (pipetwin run --trace), drawn below")
    p.add_argument("--labels", default="predicted,measured", help="panel names, comma-separated")
    args = p.parse_args(argv)
    labels = args.labels.split(",")
    paths = [x for x in (args.predicted, args.measured) if x]
    if len(labels) < len(paths):
        raise common.PlotError(f"--labels '{args.labels}': {len(paths)} names needed")
    traces = [common.load_trace(x) for x in paths]
    if len(traces) == 2:
        common.check_same_configuration(traces[0].meta, paths[0], traces[1].meta, paths[1])
        if traces[0].ranks != traces[1].ranks:
            raise common.PlotError(f"{paths[1]}: {traces[1].ranks} ranks but {paths[0]} has {traces[0].ranks}")
    fig = draw(list(zip(labels, traces)), args.title)
    for path in common.save_figure(fig, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    common.run_main(__file__, main)
