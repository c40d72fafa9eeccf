"""Running a pipetwin Program with PyTorch's own pipelining runtime.

``torch.distributed.pipelining``'s action-list runtime
(``_PipelineScheduleRuntime``) executes any schedule given as actions. Fed a
pipetwin Program, it trains the user's ``PipelineStage``s with schedules
PyTorch does not ship (zb-h2, v-half, v-min, pipedream's order, ...)::

    program = pipetwin.Program.generate("zb-h2", ranks=world_size, microbatches=8)
    schedule = pipetwin.pytorch.runtime(program, [stage], loss_fn=loss_fn)
    schedule.step(x) / schedule.step(target=y, losses=losses)   # as with any PyTorch schedule

Imports torch only when called.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Union

from . import _core
from .program import Program


def order(program: Program, with_comms: bool = True) -> "dict[int, List[Optional[str]]]":
    """Each rank's actions as PyTorch's runtime reads them (its CSV's cells):
    with ``with_comms`` pipetwin's own SEND/RECV placement, else the compute
    actions only (PyTorch then adds its own). R and STEP have no PyTorch
    action: recompute is activation checkpointing inside a stage's forward,
    and the optimizer runs after the schedule."""
    core = program._core.lowered() if with_comms else program._core.compute_only()
    rows = core.to_pytorch_csv()
    return {rank: [cell or None for cell in line.split(",")] for rank, line in enumerate(rows.splitlines())}


def check_fifo(program: Program) -> None:
    """Raises pipetwin.Error where the Program's transfers between two ranks
    are received in another order than they are sent. pipetwin's IR matches
    each receive with its send by identity; PyTorch's runtime posts
    untagged point-to-point operations, which a pair of ranks matches in
    order, so there such a Program would hand one message to another's
    receive (of the same shape, silently)."""
    from .results import _split_action

    rows = order(program, with_comms=True)
    parsed = {rank: [(a, _split_action(a)) for a in row if a] for rank, row in rows.items()}
    rank_of = {p["stage"]: rank for rank, row in parsed.items() for _, p in row if p["op"] in ("F", "B", "I", "W")}
    sent, received = {}, {}
    for rank, row in parsed.items():
        for a, p in row:
            stage, kind, mb = p["stage"], p["op"], p["microbatch"]
            if kind == "SEND_F":
                sent.setdefault((rank, rank_of[stage + 1]), []).append((f"{stage}F{mb}", a))
            elif kind == "SEND_B":
                sent.setdefault((rank, rank_of[stage - 1]), []).append((f"{stage}B{mb}", a))
            elif kind == "RECV_F":
                received.setdefault((rank_of[stage - 1], rank), []).append((f"{stage - 1}F{mb}", a))
            elif kind == "RECV_B":
                received.setdefault((rank_of[stage + 1], rank), []).append((f"{stage + 1}B{mb}", a))
    for (src, dst), sends in sent.items():
        recvs = received.get((src, dst), [])
        for (message, send), (expected, recv) in zip(sends, recvs):
            if message != expected:
                raise _core.Error(
                    f"{program.schedule}: rank {src} sends {send} to rank {dst} where rank {dst} receives {recv}: "
                    "PyTorch's runtime matches the messages between two ranks in order; run it with "
                    "with_comms=False (PyTorch places the transfers)")


def runtime(program: Program, stages: Union[Any, Sequence[Any]], loss_fn: Optional[Callable] = None,
            with_comms: bool = False, **kwargs: Any) -> Any:
    """A ``_PipelineScheduleRuntime`` over ``stages`` (this rank's
    ``PipelineStage``s, one per stage the Program places on it) that runs
    ``program``'s order of computations. PyTorch places the transfers
    (its own lowering, as for its schedules); with ``with_comms`` pipetwin's
    placement is run instead, where its messages between two ranks are
    received in the order they are sent (:func:`check_fifo`). ``kwargs`` go
    to PyTorch's constructor (``scale_grads``, ``output_merge_spec``, ...)."""
    from torch.distributed.pipelining.schedules import _Action, _add_reduce_grad, _PipelineScheduleRuntime

    stages = list(stages) if isinstance(stages, (list, tuple)) else [stages]
    if stages and stages[0].num_stages != program.stages:
        raise _core.Error(f"the stages are of a {stages[0].num_stages}-stage pipeline, but the Program has "
                          f"{program.stages} (K {program.ranks} x V {program.virtual})")
    schedule = _PipelineScheduleRuntime(stages, program.microbatches, loss_fn=loss_fn, **kwargs)
    actions = {rank: [None if a is None else _Action.from_str(a) for a in row]
               for rank, row in order(program, with_comms).items()}
    if with_comms:
        check_fifo(program)
        schedule.pipeline_order = {rank: [a for a in row if a.is_compute_op] for rank, row in actions.items()}
        # Each stage's REDUCE_GRAD after its last backward, as PyTorch's own
        # lowering adds it: where the runtime scales the accumulated gradients
        # (scale_grads) and, with data parallelism, reduces them.
        actions = {rank: _add_reduce_grad(row, program.microbatches) for rank, row in actions.items()}
        schedule._prepare_schedule_with_comms(actions, format="compute_comms")
    else:
        schedule.pipeline_order = actions
        schedule._prepare_schedule_with_comms(actions, format="compute_only")
    return schedule
