"""Calibrate from torch.profiler traces of PyTorch's own pipelining runs, and
compare a run with its prediction.

A *run* is a folder holding one trace per rank (``prof.export_chrome_trace``
on every rank, as torchtitan writes ``iteration_N/rankR_trace.json``), of a
schedule PyTorch's runtime labels: ``ScheduleInterleaved1F1B``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``,
``ScheduleLoopedBFS``, any CSV or pipetwin Program run through
``pipetwin.pytorch.runtime``, and ``ScheduleGPipe``::

    import pipetwin as pt
    cal = pt.calibrate(["runs/i1f1b-m4", "runs/izb-m8"], batch=32)   # a cost table, fitted
    print(cal)                                                        # the table, each run replayed on it
    pt.simulate(pt.Program.generate("zb-v", ranks=2, microbatches=8, virtual=2), costs=cal, batch=32)
    pt.compare("runs/zbv-m8", costs=cal, batch=32).verdict
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import _core

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class RunCheck:
    """One run replayed on the fitted table: its measured steps against the prediction."""

    path: str
    describe: str
    fitted: bool
    steps_s: List[float]
    measured_median_s: float
    measured_min_s: float
    measured_max_s: float
    predicted_s: float
    error: float          # predicted / measured median - 1
    within_spread: bool   # predicted within the run's own steps' range


@dataclass(frozen=True)
class Calibration:
    """A cost table fitted to torch.profiler runs (``costs_yaml``, what
    ``pipetwin simulate --costs`` reads) and every run replayed on it.
    ``simulate(program, costs=calibration)`` and ``compare(run,
    costs=calibration)`` take it as it is."""

    costs_yaml: str
    runs: List[RunCheck]
    notes: List[str]
    text: str
    samples: List[Dict[str, int]] = field(default_factory=list)

    def write(self, path: PathLike) -> None:
        """Writes the cost table (through a temporary and a rename)."""
        path = os.fspath(path)
        tmp = f"{path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(self.costs_yaml)
        os.replace(tmp, path)

    def to_pandas(self):
        """The runs as a DataFrame (one row each)."""
        import pandas as pd

        return pd.DataFrame([r.__dict__ for r in self.runs])

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Comparison:
    """One run against its prediction, as ``pipetwin compare --costs`` reports it."""

    predicted_step_s: float
    measured_step_s: float
    verdict: str          # "within noise", "model error", "not meaningful", "unknown"
    report: Dict[str, Any]
    text: str

    @property
    def error(self) -> float:
        """Predicted / measured - 1, of the step."""
        return self.predicted_step_s / self.measured_step_s - 1 if self.measured_step_s else 0.0

    def __str__(self) -> str:
        return self.text


def _paths(runs: Union[PathLike, Sequence[PathLike]]) -> List[str]:
    if isinstance(runs, (str, os.PathLike)):
        return [os.fspath(runs)]
    return [os.fspath(r) for r in runs]


def calibrate(runs: Union[PathLike, Sequence[PathLike]], held_out: Sequence[PathLike] = (),
              batch: Optional[int] = None) -> Calibration:
    """Fits a cost table to torch.profiler runs of one model and partition
    (each a folder of one trace per rank): per stage the mean cost of its
    F, B, I and W, of posting sends and receives, the flight across each cut.
    ``batch``: the samples of every run's step, so that each micro-batch's
    size is known (batch / M); runs of two sizes then give per-sample times.
    ``held_out`` runs are predicted on the table and reported beside."""
    j = json.loads(_core.calibrate_torch(_paths(runs), _paths(held_out) if held_out else [], batch or 0))
    checks = [RunCheck(path=r["path"], describe=r["describe"], fitted=r["fitted"], steps_s=r["steps_s"],
                       measured_median_s=r["measured_median_s"], measured_min_s=r["measured_min_s"],
                       measured_max_s=r["measured_max_s"], predicted_s=r["predicted_s"], error=r["error"],
                       within_spread=r["within_spread"]) for r in j.get("runs", [])]
    return Calibration(costs_yaml=j["cost_table"], runs=checks, notes=j.get("notes", []), text=j["text"],
                       samples=j.get("samples", []))


def costs_argument(costs: Any) -> "tuple[str, str, bool]":
    """(text or path, source, is_file) of a cost table given as a file path
    (read by the library, whose errors name its lines), a Calibration, a
    pandas DataFrame (one row per stage) or a dict: what simulate() and
    compare() pass to the extension."""
    if isinstance(costs, (str, os.PathLike)):
        return os.fspath(costs), os.fspath(costs), True
    if isinstance(costs, Calibration):
        return costs.costs_yaml, "<calibration>", False
    if hasattr(costs, "to_dict") and hasattr(costs, "columns"):  # a pandas DataFrame: one row per stage
        rows = [{k: v for k, v in row.items() if k != "stage" and v == v} for row in costs.to_dict("records")]
        return json.dumps({"stages": rows}, default=float), "<DataFrame>", False
    if isinstance(costs, Mapping):
        return json.dumps(costs, default=float), "<costs>", False
    raise TypeError("costs= takes a dict, a pandas DataFrame, a Calibration or a file path, not " + type(costs).__name__)


def compare(run: PathLike, costs: Any = None, batch: Optional[int] = None, repeats: Sequence[PathLike] = (),
            traces: Optional[PathLike] = None, *, predicted: Optional[PathLike] = None,
            schedule: Optional[PathLike] = None) -> Comparison:
    """The run (a folder of one torch.profiler trace per rank) against its
    prediction on ``costs`` (as simulate() takes them):
    the run's own order of actions timed on the table. ``repeats``: other
    runs of the same configuration, whose spread the verdict weighs.
    ``traces``: a prefix; PREFIX.predicted.json and PREFIX.measured.json are
    written for ``pipetwin plot gantt``.

    Or, with ``predicted`` instead of ``costs``: ``run`` and ``predicted``
    are pipetwin's own traces (``pipetwin run --trace`` and ``pipetwin
    simulate --trace``), compared as ``pipetwin compare`` does (``schedule``:
    a schedule file both must have run)."""
    if (costs is None) == (predicted is None):
        raise _core.Error("compare() takes costs= (a torch.profiler run against a cost table) or predicted= (a "
                          "pipetwin run's trace against a prediction's), one of them")
    if predicted is not None:
        if batch or traces:
            raise _core.Error("compare(predicted=...): batch and traces go with costs=")
        j = json.loads(_core.compare_traces(os.fspath(predicted), os.fspath(run), os.fspath(schedule) if schedule else "",
                                            _paths(repeats) if repeats else []))
    else:
        if schedule:
            raise _core.Error("compare(costs=...): the run's own order is compared; schedule goes with predicted=")
        text, source, is_file = costs_argument(costs)
        j = json.loads(_core.compare_costs(os.fspath(run), text, source, is_file, batch or 0,
                                           _paths(repeats) if repeats else [], os.fspath(traces) if traces else ""))
    step = j["step_time_s"]
    return Comparison(predicted_step_s=step["predicted"], measured_step_s=step["measured"],
                      verdict=j["verdict"]["step_time"], report=j, text=j["text"])
