"""pipetwin's benchmarks, one module each, run by `python -m bench NAME`
from the repository's root (bench/__main__.py). Each module has a one-line
docstring head (what --list prints), add_arguments(parser) and run(args),
which prints its table and returns its figures as a dict for the results file.

The C++ micro-benchmarks (bench_schedule.cpp, bench_sim.cpp) and the plain
LibTorch loop beside them are built by bench/CMakeLists.txt; the PyTorch
baselines (*_baseline.py) are scripts the benchmarks start with the project's
Python.
"""

# In --list's order.
BENCHMARKS = (
    "core",
    "binaries",
    "sweep",
    "exec",
    "parallel",
    "fidelity",
    "cross_model",
    "schedules",
    "narayanan",
    "torchtitan_h100",
    "dgxc_h100",
    "mbridge_h100",
    "torch_profiler",
    "noise",
    "malloc",
    "gloo_backoff",
)
