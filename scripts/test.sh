#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
cd "${PIPETWIN_BUILD_DIR:-build}"
ctest --output-on-failure -j "${PIPETWIN_JOBS:-$(nproc)}" "$@"
