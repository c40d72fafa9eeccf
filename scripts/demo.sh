#!/usr/bin/env bash
# The main job, end to end on this machine: installs what is missing, builds,
# generates a 1F1B schedule for 4 ranks and 8 micro-batches, prints its
# unit-time dry run, writes it as a PyTorch CSV and validates that file.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
PIPETWIN="${PIPETWIN_BUILD_DIR:-build}/cli/pipetwin"
OUT="${PIPETWIN_OUT:-out}"
mkdir -p "$OUT"

"$PIPETWIN" schedule --schedule 1f1b --ranks 4 --microbatches 8 --format grid
"$PIPETWIN" schedule --schedule 1f1b --ranks 4 --microbatches 8 --format csv --out "$OUT/1f1b_k4_m8.csv"
"$PIPETWIN" validate "$OUT/1f1b_k4_m8.csv"
