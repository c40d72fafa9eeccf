"""Matplotlib figures of a SimulationResult, for notebooks (pipetwin's own
plots/ scripts draw the same from Chrome traces on the command line)."""
from __future__ import annotations

from typing import Any, Optional

# Okabe-Ito for compute (colour-blind safe), light tints for transfers: plots/common.py's palette.
_PALETTE = dict(F="#0072B2", B="#D55E00", I="#E69F00", W="#CC79A7", R="#009E73", STEP="#333333",
                REDUCE_GRAD="#56B4E9", SEND_F="#9ecae1", RECV_F="#9ecae1", SEND_B="#f4a582", RECV_B="#f4a582")


def gantt(result: Any, title: Optional[str] = None, ax: Any = None) -> Any:
    """One row per rank: compute actions as bars (their micro-batch inside),
    transfers as thin bars below them; the step's end dashed. Returns the Figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from .results import _split_action

    if ax is None:
        fig, ax = plt.subplots(figsize=(12, 0.45 * max(result.ranks, 1) + 1.4), layout="constrained")
    else:
        fig = ax.figure
    seen = []
    for a in result.timeline:
        op = _split_action(a.action)["op"]
        transfer = op.startswith("SEND") or op.startswith("RECV")
        y, h = (a.rank + 0.72, 0.2) if transfer else (a.rank + 0.05, 0.62)
        ax.broken_barh([(a.start, a.end - a.start)], (y, h), facecolors=_PALETTE.get(op, "#999999"),
                       edgecolor="white", linewidth=0.4)
        if op not in seen:
            seen.append(op)
    ax.axvline(result.step_time_s, color="#555555", linestyle="--", linewidth=0.8)
    ax.set_ylim(max(result.ranks, 1), 0)
    ax.set_yticks([r + 0.36 for r in range(result.ranks)], [f"rank {r}" for r in range(result.ranks)])
    ax.set_xlabel("time (s); dashed: end of the step")
    ax.set_title(title or f"{result.schedule}: step {result.step_time_s:.4g} s, bubble {100 * result.bubble:.1f}%",
                 loc="left")
    ax.legend(handles=[Patch(facecolor=_PALETTE.get(k, "#999999"), label=k) for k in seen if not k.startswith("RECV")],
              loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=10, frameon=False)
    return fig
