"""sweep() and plan(): many configurations of a model on a hardware, as
``pipetwin sweep`` and ``pipetwin plan`` evaluate them, as typed results."""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from . import _core


def _ints(values) -> List[int]:
    return [int(v) for v in ([values] if isinstance(values, int) else values)]


def _strs(values) -> List[str]:
    return [values] if isinstance(values, str) else list(values)


@dataclass(frozen=True)
class SweepResult:
    """The sweep's rows, in the CSV's order (``pipetwin sweep``'s columns:
    schedule, recompute, K, V, M, batch, status, step and throughput, bubble,
    memory, engine, reason, T, D), as strings and numbers; ``csv`` the file's text."""

    rows: List[Dict[str, Any]]
    csv: str
    report: Dict[str, int]

    def ok(self) -> List[Dict[str, Any]]:
        """The rows that fit and ran."""
        return [r for r in self.rows if r.get("status") == "ok"]

    def to_pandas(self):
        import pandas as pd

        return pd.read_csv(io.StringIO(self.csv), comment="#")


def _number(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def sweep(model: str, hardware: str, schedules: Sequence[str] | str, ranks: Sequence[int] | int,
          microbatches: Sequence[int] | int, *, microbatch_sizes: Sequence[int] | int = (1,),
          recompute: Sequence[str] | str = ("none",), virtual: int = 2, batch: int = 0,
          tensor: Sequence[int] | int = (1,), data: Sequence[int] | int = (1,), engine: str = "auto",
          jobs: int = 0, zero: int = 0, shard_group: int = 0, precision: str = "", context: int = 1,
          expert: int = 1, expert_tensor: int = 0) -> SweepResult:
    """Every combination of the schedules, recompute policies, micro-batch
    sizes, K, M, T and D of ``model`` (a spec file) on ``hardware`` (a preset
    or a file), as ``pipetwin sweep`` evaluates them: the exact fast path
    where nothing contends, SimGrid elsewhere. ``zero`` (ZeRO's stage),
    ``shard_group`` (HSDP's groups), ``precision``, ``context``, ``expert``
    and ``expert_tensor`` as ``sweep``'s ``--zero``, ``--shard-group``,
    ``--precision``, ``--context``, ``--expert`` and ``--expert-tensor``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sweep.csv")
        report = json.loads(_core.sweep(os.fspath(model), hardware, out, _strs(schedules), _ints(ranks),
                                        _ints(microbatches), _ints(microbatch_sizes), _strs(recompute), virtual, batch,
                                        _ints(tensor), _ints(data), engine, jobs, zero, shard_group, precision, context,
                                        expert, expert_tensor))
        with open(out, encoding="utf-8") as f:
            text = f.read()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    rows = [{k: _number(v) for k, v in r.items()} for r in csv.DictReader(lines)]
    return SweepResult(rows=rows, csv=text, report=report)


@dataclass(frozen=True)
class PlanResult:
    """Every candidate layout of a plan (``pipetwin plan``): ``candidates``
    as ``plan --json`` lists them, each with its ``status`` (ok, oom, error),
    ``reason`` and ``rank`` (its place among the ok ones, best first; 0 for
    the others)."""

    candidates: List[Dict[str, Any]]
    description: str
    prediction_error: float

    def ranking(self) -> List[Dict[str, Any]]:
        """The ok candidates, best first."""
        return sorted((c for c in self.candidates if c["rank"] > 0), key=lambda c: c["rank"])

    def to_pandas(self):
        import pandas as pd

        rows = []
        for c in self.candidates:
            row = {k: v for k, v in c.items() if k != "why"}
            row.update(c.get("why", {}))
            rows.append(row)
        return pd.DataFrame(rows)


def plan(model: str, hardware: str, gpus: int, global_batch: int, *, max_pp: int = 0,
         microbatch_sizes: Sequence[int] = (1, 2, 4, 8), schedules: Sequence[str] = ("1f1b", "interleaved-1f1b"),
         virtual: Sequence[int] = (2, 4), recompute: Sequence[str] = ("none", "full"), top_sim: int = 8,
         jobs: int = 0, zero: Sequence[int] = (0, 1), precision: Sequence[str] | str = (),
         context: Sequence[int] | int = (1,), expert: Sequence[int] | int = (1,),
         expert_tensor: int = 0, shard_group: Sequence[int] | int = (0,)) -> PlanResult:
    """The T x K x D layouts of ``gpus`` devices for ``model`` at
    ``global_batch`` samples a step, each predicted, as ``pipetwin plan``
    ranks them (the best ``top_sim`` replayed in SimGrid); ``zero``: ZeRO's
    stages tried where D > 1 (``plan --zero``); ``precision``: the
    arithmetics tried (``plan --precision``; empty: the model's);
    ``context``: the context-parallel degrees tried (``plan --context``);
    ``expert``: the expert-parallel degrees tried (``plan --expert``) and
    ``expert_tensor`` their experts' tensor-parallel degree (``--expert-tensor``);
    ``shard_group``: HSDP's shard groups tried where ZeRO shards (``plan
    --shard-group``; 0: over every replica)."""
    j = json.loads(_core.plan(os.fspath(model), hardware, gpus, global_batch, max_pp, _ints(microbatch_sizes),
                              _strs(schedules), _ints(virtual), _strs(recompute), top_sim, jobs, _ints(zero),
                              [p for p in _strs(precision) if p], _ints(context),
                              _ints(expert), expert_tensor, _ints(shard_group)))
    return PlanResult(candidates=j["candidates"], description=j["description"], prediction_error=j["prediction_error"])
