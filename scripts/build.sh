#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures (once) and
# builds pipetwin in ./build, reusing what is already built.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

BUILD_DIR="${PIPETWIN_BUILD_DIR:-build}"
JOBS="${PIPETWIN_JOBS:-$(nproc)}"
mkdir -p "$BUILD_DIR"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD_DIR/configure.log" 2>&1 || {
    cat "$BUILD_DIR/configure.log" >&2
    echo "[build] configure failed (log above)" >&2
    exit 1
  }
fi
# Ninja prints one status line per step on a terminal; in CI (no terminal) it
# prints them all, so keep only the summary and any error there.
if [ -t 1 ]; then
  cmake --build "$BUILD_DIR" -j "$JOBS"
else
  cmake --build "$BUILD_DIR" -j "$JOBS" >"$BUILD_DIR/build.log" 2>&1 || {
    cat "$BUILD_DIR/build.log" >&2
    echo "[build] build failed (log above)" >&2
    exit 1
  }
  echo "[build] $(tail -n 1 "$BUILD_DIR/build.log")"
fi
