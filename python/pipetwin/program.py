"""Programs: pipetwin's schedule IR, from a generator, a file, text, or a
PyTorch pipelining schedule object."""
from __future__ import annotations

import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Union

from . import _core


def generators() -> List[str]:
    """The names of pipetwin's schedule generators (gpipe, 1f1b, zb-h2, v-half, ...)."""
    return list(_core.generators())


class Program:
    """A pipeline schedule: every rank's ordered actions (F, B, I, W, R,
    SEND/RECV, STEP), K ranks, V stages per rank, M micro-batches."""

    def __init__(self, core: "_core.Program") -> None:
        self._core = core

    # --- where a Program comes from ---------------------------------------
    @classmethod
    def generate(cls, name: str, ranks: int, microbatches: int, virtual: int = 1, recompute: str = "none") -> "Program":
        """One of pipetwin's generators (:func:`generators`) at K ranks, M micro-batches, V stages per rank."""
        return cls(_core.generate(name, ranks, microbatches, virtual, recompute))

    @classmethod
    def read(cls, path: Union[str, "os.PathLike[str]"]) -> "Program":
        """A schedule file: pipetwin's text or JSON, or PyTorch's CSV (with or without communication)."""
        return cls(_core.read(os.fspath(path)))

    @classmethod
    def parse(cls, text: str, source: str = "<text>") -> "Program":
        """The same from text (the form told apart by its content)."""
        return cls(_core.parse(text, source))

    @classmethod
    def from_torch(cls, schedule: Any, with_comms: bool = False, validate: bool = True) -> "Program":
        """A PyTorch pipelining schedule: a schedule object (``ScheduleGPipe``,
        ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleZBVZeroBubble``,
        ...; its ``pipeline_order``, or with ``with_comms`` its
        ``pipeline_order_with_comms``), a ``{rank: [action or None]}`` dict, or
        a list of each rank's actions (``_schedule_visualizer.get_schedule_ops``).
        Actions are read by their text form (``0F1``, ``1SEND_F0``, ...), as
        PyTorch's own CSV holds them; torch itself is not imported. With
        ``validate`` (the default) an order that is not a valid schedule is
        refused, naming the rank and the step (PyTorch 2.13's
        ``Schedule1F1B.pipeline_order`` numbers the last rank's forwards
        1..M, for one)."""
        order = _pipeline_order(schedule, with_comms)
        rows = []
        for rank in sorted(order):
            rows.append(",".join("" if a is None else str(a) for a in order[rank]))
        source = type(schedule).__name__
        program = cls.parse("\n".join(rows) + "\n", source=source)
        if validate:
            try:
                program.validate()
            except _core.Error as e:
                raise _core.Error(f"{source}'s pipeline order: {e}") from None
        return program

    # --- what it is -------------------------------------------------------
    @property
    def schedule(self) -> str:
        return self._core.schedule

    @property
    def ranks(self) -> int:
        return self._core.ranks

    @property
    def virtual(self) -> int:
        return self._core.virtual

    @property
    def microbatches(self) -> int:
        return self._core.microbatches

    @property
    def stages(self) -> int:
        return self._core.stages

    @property
    def recompute(self) -> str:
        return self._core.recompute

    def actions(self, lowered: bool = False) -> List[List[str]]:
        """Every rank's actions in order, as text (``0F1``); ``lowered``: with
        the transfers, recomputes and optimizer steps the passes add."""
        return (self._core.lowered() if lowered else self._core).actions()

    def validate(self) -> None:
        """Raises :class:`pipetwin.Error` naming the rank and the step where the schedule is wrong or deadlocks."""
        self._core.validate()

    # --- what it becomes --------------------------------------------------
    def to_text(self) -> str:
        return self._core.to_text()

    def to_json(self) -> str:
        return self._core.to_json()

    def to_pytorch_csv(self) -> str:
        """The CSV that ``torch.distributed.pipelining``'s ``_load_csv`` reads."""
        return self._core.to_pytorch_csv()

    def pipeline_order(self, with_comms: bool = False) -> dict:
        """``{rank: [action text or None]}``: PyTorch's ``pipeline_order`` (or
        with ``with_comms`` its ``pipeline_order_with_comms``), for its runtime
        (:mod:`pipetwin.pytorch`)."""
        from .pytorch import order
        return order(self, with_comms)

    def grid(self) -> str:
        """The step x rank grid of a dry run in unit time (``pipetwin schedule --format grid``)."""
        return self._core.grid()

    def __repr__(self) -> str:
        return (f"Program({self.schedule!r}, ranks={self.ranks}, virtual={self.virtual}, "
                f"microbatches={self.microbatches}, recompute={self.recompute!r})")


def _pipeline_order(schedule: Any, with_comms: bool) -> Mapping[int, Sequence[Any]]:
    if isinstance(schedule, Mapping):
        return schedule
    if isinstance(schedule, (list, tuple)):
        return dict(enumerate(schedule))
    name = "pipeline_order_with_comms" if with_comms else "pipeline_order"
    order: Optional[Mapping[int, Iterable[Any]]] = getattr(schedule, name, None)
    if not order:
        raise _core.Error(
            f"{type(schedule).__name__} has no {name}: expected a torch.distributed.pipelining schedule"
            + (" whose runtime has prepared its communication (_PipelineScheduleRuntime)" if with_comms else "")
            + ", a {rank: [actions]} dict or a list of each rank's actions")
    return {int(rank): list(actions) for rank, actions in order.items()}
