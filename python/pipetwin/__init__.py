"""pipetwin: predictable pipeline-parallel training.

Schedules as Programs (from a generator, a file, or a PyTorch schedule
object), simulated against your own per-stage costs or a model on a
hardware::

    import pipetwin as pt
    program = pt.Program.from_torch(schedule)            # or pt.Program.generate("zb-h2", ranks=4, microbatches=8)
    result = pt.simulate(program, costs={"stages": [{"forward_s": 0.010, "backward_s": 0.020}]})
    print(result.step_time_s, result.bubble)
    result.gantt()                                       # a matplotlib Figure

torch.profiler traces of PyTorch's own schedules fit a cost table
(``pipetwin.calibrate``), and a run is held against its prediction
(``pipetwin.compare``); whole runs' step times fit the device
(``pipetwin.calibrate_runs``).

Errors in the inputs raise ``pipetwin.Error`` (a ValueError) naming the
file, the line or the field.
"""
from ._core import Error, __version__
from .program import Program, generators
from .results import MemoryReport, SimulationResult, TimedAction
from .runs import RunsFit, calibrate_runs
from .simulate import simulate
from .sweep import PlanResult, SweepResult, plan, sweep
from .torch_profiler import Calibration, Comparison, RunCheck, calibrate, compare
from . import pytorch  # noqa: E402  (imports torch only when called)

__all__ = [
    "Calibration",
    "Comparison",
    "Error",
    "MemoryReport",
    "PlanResult",
    "Program",
    "SimulationResult",
    "SweepResult",
    "RunCheck",
    "RunsFit",
    "TimedAction",
    "__version__",
    "calibrate",
    "calibrate_runs",
    "compare",
    "generators",
    "plan",
    "simulate",
    "sweep",
]
