#!/usr/bin/env bash
# The main job, end to end on this machine: installs what is missing, builds,
# then for a small Transformer on 4 ranks:
#   1. prints the 1F1B schedule's unit-time dry run (K=4, M=8),
#   2. partitions the model and simulates the step in SimGrid (A100s), writing
#      the predicted timeline as a Chrome trace,
#   3. sweeps gpipe/1f1b over K x M into a CSV,
#   4. runs 1f1b K=2 M=8 for real and writes the measured trace.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
PIPETWIN="${PIPETWIN_BUILD_DIR:-build}/cli/pipetwin"
OUT="${PIPETWIN_OUT:-out}"
mkdir -p "$OUT"

echo "== 1. the schedule"
"$PIPETWIN" schedule --schedule 1f1b --ranks 4 --microbatches 8 --format grid
"$PIPETWIN" schedule --schedule 1f1b --ranks 4 --microbatches 8 --format csv --out "$OUT/1f1b_k4_m8.csv"
"$PIPETWIN" validate "$OUT/1f1b_k4_m8.csv"

echo
echo "== 2. partition and simulate examples/transformer-small.yaml on 4 x A100"
"$PIPETWIN" partition --model examples/transformer-small.yaml --hardware a100 --ranks 4 --schedule 1f1b --microbatches 8
"$PIPETWIN" simulate --model examples/transformer-small.yaml --hardware a100 --schedule 1f1b --ranks 4 \
  --microbatches 8 --batch 32 --engine simgrid --trace "$OUT/transformer-small_1f1b_k4_m8.trace.json"

echo
echo "== 3. sweep"
"$PIPETWIN" sweep --model examples/transformer-small.yaml --hardware a100 --ranks 1,2,4 --microbatches 1,4,16 \
  --schedules gpipe,1f1b --out "$OUT/sweep.csv"
head -n 8 "$OUT/sweep.csv"

echo
echo "== 4. run 1f1b K=2 M=8 for real (LibTorch, 2 processes over Gloo) and write the measured trace"
"$PIPETWIN" run --model examples/transformer-small.yaml --schedule 1f1b --ranks 2 --microbatches 8 --batch 32 \
  --steps 5 --threads 1 --trace "$OUT/transformer-small_1f1b_k2_m8.measured.json"
