"""simulate(): a Program against your own costs, or a model on a hardware."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Union

from . import _core
from .program import Program
from .results import SimulationResult, result_from_json
from .torch_profiler import costs_argument

Costs = Union[Mapping[str, Any], "os.PathLike[str]", str, Any]


def simulate(program: Program, costs: Optional[Costs] = None, *, model: Optional[str] = None,
             hardware: Optional[str] = None, engine: str = "auto", batch: int = 0, recompute: str = "",
             partition: str = "", tensor: int = 1, data: int = 1, zero: int = 0,
             precision: str = "", context: int = 1, expert: int = 1, expert_tensor: int = 0) -> SimulationResult:
    """Predict one step of ``program``.

    With ``costs``: your own per-stage costs (docs/formats.md, "Cost tables"):
    a dict (``{"stages": [{"forward_s": ..., "backward_s": ...}], "link": ...}``),
    a pandas DataFrame with one row per stage and the stage fields as columns,
    a :class:`pipetwin.Calibration` (``pipetwin.calibrate`` of torch.profiler
    runs), or the path of a YAML, JSON or CSV table; ``hardware`` (a preset or
    a file) is then optional, for the network and the devices' memory;
    ``batch`` sets micro-batches of batch / M samples (the table's per-sample
    times moved there).

    With ``model``: a model spec (YAML or a Hugging Face config.json) on
    ``hardware``, as ``pipetwin simulate`` does; ``batch``, ``recompute``,
    ``partition``, ``tensor``, ``data``, ``zero`` (ZeRO's stage over the
    data group, 0 to 3) and ``precision`` (``bf16``, ``fp16`` or ``fp8`` for
    a 16-bit model; ``""``: the spec's), ``context`` (C, the sequence
    split over C devices of each replica), ``expert`` (E, a mixture's
    experts split over E replicas) and ``expert_tensor`` (1: the experts
    whole on each device, ``--expert-tensor 1``; 0: the tensor group's T)
    as its options.

    ``engine``: ``auto`` (the exact fast path where nothing contends, else
    SimGrid), ``fast`` or ``simgrid``.
    """
    if not isinstance(program, Program):
        raise TypeError(f"simulate() takes a pipetwin.Program, not {type(program).__name__}")
    if (costs is None) == (model is None):
        raise _core.Error("simulate() takes costs= (your own per-stage costs) or model= (a model spec), one of them")
    if costs is not None:
        text, source, is_file = costs_argument(costs)
        return result_from_json(_core.simulate_costs(program._core, text, source, is_file, engine, hardware or "", batch))
    if not hardware:
        raise _core.Error("simulate(model=...) needs hardware= (a preset name or a hardware file)")
    return result_from_json(_core.simulate_model(program._core, os.fspath(model), hardware, engine, batch, recompute,
                                                 partition, tensor, data, zero, precision, context, expert,
                                                 expert_tensor))
