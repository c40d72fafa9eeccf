"""Typed results of a simulation."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class TimedAction:
    rank: int
    action: str  # its text form: 0F1, 1SEND_B0, ...
    start: float  # seconds from the step's start
    end: float


@dataclass(frozen=True)
class MemoryReport:
    """One stage's (or one rank's) peak memory in bytes against its device's capacity."""
    peak_bytes: float
    capacity_bytes: Optional[float]  # None: no capacity given
    fits: bool
    weights: float
    gradients: float
    optimizer_state: float
    activations: float
    workspace: float
    reserve: float
    peak_stashed_microbatches: Optional[int] = None


@dataclass(frozen=True)
class SimulationResult:
    """One predicted step: its time, bubble, memory and timeline."""
    headline: str
    engine: str  # the engine that answered
    engine_reason: str  # and why that one
    step_time_s: float
    throughput: float  # samples per second
    samples: float
    bubble: float  # mean idle share of the ranks
    busy_s: List[float]  # per rank
    idle: List[float]  # per rank
    memory: List[MemoryReport]  # per stage
    rank_memory: List[MemoryReport]  # per rank where a rank holds several stages
    timeline: List[TimedAction] = field(repr=False)
    ranks: int = 0
    microbatches: int = 0
    schedule: str = ""

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.memory) and all(m.fits for m in self.rank_memory)

    def to_pandas(self) -> Any:
        """The timeline as a DataFrame (rank, action, stage, op, microbatch, start, end); needs pandas."""
        import pandas as pd  # an optional dependency: pip install pipetwin[pandas]
        rows = [{"rank": a.rank, "action": a.action, **_split_action(a.action), "start": a.start, "end": a.end}
                for a in self.timeline]
        return pd.DataFrame(rows, columns=["rank", "action", "stage", "op", "microbatch", "start", "end"])

    def memory_frame(self) -> Any:
        """Peak memory per stage as a DataFrame, part by part (bytes); needs pandas."""
        import pandas as pd
        return pd.DataFrame([{"stage": s, **m.__dict__} for s, m in enumerate(self.memory)])

    def gantt(self, title: Optional[str] = None, ax: Any = None) -> Any:
        """The timeline as a Gantt chart: a matplotlib Figure (needs matplotlib)."""
        from .plots import gantt
        return gantt(self, title=title, ax=ax)


def _split_action(text: str) -> Dict[str, Any]:
    stage = ""
    i = 0
    while i < len(text) and text[i].isdigit():
        stage += text[i]
        i += 1
    rest = text[i:]
    j = len(rest)
    while j > 0 and rest[j - 1].isdigit():
        j -= 1
    return {"stage": int(stage) if stage else None, "op": rest[:j], "microbatch": int(rest[j:]) if rest[j:] else None}


def _memory(entry: Dict[str, Any]) -> MemoryReport:
    parts = entry["bytes"]
    capacity = entry.get("capacity_bytes")
    return MemoryReport(
        peak_bytes=entry["peak_bytes"], capacity_bytes=capacity, fits=entry["fits"], weights=parts["weights"],
        gradients=parts["gradients"], optimizer_state=parts["optimizer_state"], activations=parts["activations"],
        workspace=parts["workspace"], reserve=parts["reserve"],
        peak_stashed_microbatches=entry.get("peak_stashed_microbatches"))


def result_from_json(text: str) -> SimulationResult:
    j = json.loads(text)
    s = j["summary"]
    timeline = [TimedAction(rank, a[0], a[1], a[2]) for rank, actions in enumerate(j["timeline"]) for a in actions]
    return SimulationResult(
        headline=j.get("headline", ""), engine=s["engine"], engine_reason=j["engine_reason"],
        step_time_s=s["step_time_s"], throughput=s["throughput_samples_per_s"], samples=s["samples"],
        bubble=s["bubble_fraction"], busy_s=list(s["busy_s_per_rank"]), idle=list(s["idle_fraction_per_rank"]),
        memory=[_memory(m) for m in s.get("memory_per_stage", [])],
        rank_memory=[_memory(m) for m in s.get("memory_per_rank", [])], timeline=timeline, ranks=j["ranks"],
        microbatches=j["microbatches"], schedule=j["schedule"])
