#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (CTest),
# then the sanitizer and fuzzing pass (scripts/sanitize.sh; skip it with
# PIPETWIN_SKIP_SANITIZE=1).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
(cd "${PIPETWIN_BUILD_DIR:-build}" && ctest --output-on-failure -j "${PIPETWIN_JOBS:-$(nproc)}" "$@")
if [ "${PIPETWIN_SKIP_SANITIZE:-0}" != 1 ]; then
  bash scripts/sanitize.sh
fi
