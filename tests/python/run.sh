#!/usr/bin/env bash
# The Python package as a user installs it: a fresh virtualenv (no torch),
# `pip install .` from the repository, then tests/python/test_package.py;
# the tests that need torch, pandas or matplotlib run again from the
# project's virtualenv (PIPETWIN_VENV), which has them, with the package
# added to its path. $1: the `pipetwin` binary, for the command-line checks.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CLI="${1:+$(realpath "$1")}"
VENV_ROOT="${PIPETWIN_PYTEST_VENV:-$ROOT/build/python/venv}"
BASE_PYTHON="${PIPETWIN_BASE_PYTHON:-python3}"
if [ ! -x "$VENV_ROOT/bin/python" ]; then
  "$BASE_PYTHON" -m venv "$VENV_ROOT"
fi
# Quiet in CI (no terminal): pip's progress bars off.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
"$VENV_ROOT/bin/python" -m pip install --quiet "$ROOT" 2>&1 | tail -n 20
cd "$VENV_ROOT"  # not the source tree: the installed package, not python/pipetwin
echo "[python] the package in a fresh virtualenv (no torch):"
PIPETWIN_CLI="$CLI" "$VENV_ROOT/bin/python" -B "$ROOT/tests/python/test_package.py" -v 2>&1 | tail -n 30
PROJECT_PYTHON="${PIPETWIN_VENV:-$HOME/.cache/pipetwin/venv}/bin/python"
if [ -x "$PROJECT_PYTHON" ]; then
  SITE="$("$VENV_ROOT/bin/python" -c 'import pipetwin, os; print(os.path.dirname(os.path.dirname(pipetwin.__file__)))')"
  echo "[python] with torch, pandas and matplotlib (the project's virtualenv):"
  PYTHONPATH="$SITE" PIPETWIN_CLI="$CLI" "$PROJECT_PYTHON" -B "$ROOT/tests/python/test_package.py" -v 2>&1 | tail -n 30
  echo "[python] pipetwin's schedules on PyTorch's runtime, over Gloo:"
  PYTHONPATH="$SITE" "$PROJECT_PYTHON" -B "$ROOT/tests/python/test_torch_runtime.py" -v 2>&1 | grep -v "^USDT\|gpuGetDeviceCount\|^$" | tail -n 30
  PYTHONPATH="$SITE" "$PROJECT_PYTHON" -B "$ROOT/examples/python/train_zb_h2.py" 2>&1 | grep -v "^USDT\|gpuGetDeviceCount\|^$" | tail -n 8
  echo "[python] calibration from torch.profiler traces of PyTorch's own schedules:"
  PYTHONPATH="$SITE" PIPETWIN_CLI="$CLI" "$PROJECT_PYTHON" -B "$ROOT/tests/python/test_torch_profiler.py" -v 2>&1 | grep -v "^USDT\|gpuGetDeviceCount\|^$" | tail -n 30
fi
