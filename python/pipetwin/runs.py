"""Fit the device to whole runs and their speed: what a cluster's user has
without traces (a table of step times or TFLOP/s per GPU, Megatron-LM's
training log, torchtitan's TOML and log), as ``pipetwin calibrate --runs``::

    import pipetwin as pt
    fit = pt.calibrate_runs("runs.csv")                  # rows with role fit or predict
    print(fit.max, fit.half_flops, fit.median_error)
    fit.to_pandas()                                      # a row per run: measured, predicted, error
    open("fitted.yaml", "w").write(fit.hardware_yaml)    # the fitted hardware, for simulate and plan
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _core

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class RunsFit:
    """The fitted curve (``max``, ``half_flops``, ``memory_efficiency``, and with
    ``fit_attention`` the factor on the attention rates, else 0), each run's
    measured and predicted step with its error (``runs``: dicts as the
    command's ``--json`` gives them), the errors over the predicted runs and
    the fitted runs left out one at a time, and the fitted hardware file."""

    max: float
    half_flops: float
    memory_efficiency: float
    attention_scale: float
    runs: List[Dict[str, Any]]
    median_error: float
    worst_error: float
    median_loo_error: float
    worst_loo_error: float
    hardware_yaml: str
    text: str

    def __str__(self) -> str:
        return self.text

    def to_pandas(self) -> Any:
        """A DataFrame, one row per run (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.runs)


def calibrate_runs(files: Union[PathLike, Sequence[PathLike]] = (), *, hardware: Optional[str] = None,
                   torchtitan: Sequence[Tuple[PathLike, PathLike]] = (), model: Optional[PathLike] = None,
                   fit: Sequence[str] = (), fit_attention: bool = False, jobs: int = 0) -> RunsFit:
    """``pipetwin calibrate --runs``: ``files`` are runs CSVs or Megatron-LM
    logs (a log needs ``hardware``); ``torchtitan`` (job TOML, training log)
    pairs of the flavor ``model`` on ``hardware``; ``fit`` the runs fitted by
    name (default: those whose role is fit); ``fit_attention`` also fits a
    factor on the hardware's attention kernel's rates; ``jobs`` SimGrid
    replays at once (0: the cores)."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    pairs: List[str] = []
    for toml, log in torchtitan:
        pairs += [os.fspath(toml), os.fspath(log)]
    j = json.loads(_core.calibrate_runs([os.fspath(f) for f in files], pairs, os.fspath(model) if model else "",
                                        hardware or "", list(fit), fit_attention, jobs))
    f = j["fit"]
    return RunsFit(max=f["max"], half_flops=f["half_flops"], memory_efficiency=f["memory_efficiency"],
                   attention_scale=f.get("attention_scale", 0), runs=j.get("runs", []),
                   median_error=j["predicted"]["median_error"], worst_error=j["predicted"]["worst_error"],
                   median_loo_error=j["leave_one_out"]["median_error"],
                   worst_loo_error=j["leave_one_out"]["worst_error"], hardware_yaml=j["hardware_yaml"], text=j["text"])
