#!/usr/bin/env bash
# Sweep speed, measured side by side in one run on this machine: the same
# kind of grid through the fast path (in-process, every core) and through
# SimGrid (a child process per configuration), a 1,000-configuration sweep in
# both, then a 1,008,000-configuration sweep with --engine auto. Prints wall
# times, configurations per second, and the rows of the big sweep by status
# and engine.
#   bash scripts/bench_sweep.sh            (about 10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
PIPETWIN="${PIPETWIN_BUILD_DIR:-build}/cli/pipetwin"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODEL=examples/transformer-small.yaml
# shellcheck disable=SC2054  # the commas separate the values of one option
COMMON=(--model "$MODEL" --hardware a100 --ranks 1,2,3,4,5,6 --schedules gpipe,1f1b,interleaved-1f1b,zb-h1,pipedream
        --recompute none,full,except-last)

timed() {  # prints the wall seconds of "$@"
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
calc() { awk "BEGIN { print $1 }"; }

# shellcheck disable=SC2054
small=(--microbatches "$(seq -s, 1 16)" --microbatch-size 1,2,4)   # 6 x 16 x 5 x 3 x 3 = 4,320 configurations
fast=$(timed "$PIPETWIN" sweep "${COMMON[@]}" "${small[@]}" --engine fast --out "$TMP/fast.csv")
sg=$(timed "$PIPETWIN" sweep "${COMMON[@]}" "${small[@]}" --engine simgrid --out "$TMP/simgrid.csv")
n=$(($(wc -l < "$TMP/fast.csv") - 1))
printf "%d configurations: fast path %.2f s (%.0f/s), SimGrid %.2f s (%.0f/s), ratio %.1fx\n" \
  "$n" "$fast" "$(calc "$n / $fast")" "$sg" "$(calc "$n / $sg")" "$(calc "$sg / $fast")"

# 4 x 25 x 2 x 5 = 1,000 configurations, every one runnable: SimGrid, then the fast path.
# shellcheck disable=SC2054
k1000=(--model "$MODEL" --hardware a100 --ranks 1,2,3,4 --microbatches "$(seq -s, 1 25)" --schedules gpipe,1f1b
       --microbatch-size 1,2,4,8,16)
sg1000=$(timed "$PIPETWIN" sweep "${k1000[@]}" --engine simgrid --out "$TMP/sg1000.csv")
fast1000=$(timed "$PIPETWIN" sweep "${k1000[@]}" --engine fast --out "$TMP/fast1000.csv")
printf "%d configurations: SimGrid %.2f s, fast path %.2f s\n" "$(($(wc -l < "$TMP/sg1000.csv") - 1))" "$sg1000" "$fast1000"

big=(--microbatches "$(seq -s, 1 64)" --microbatch-size "$(seq -s, 1 175)")  # 6 x 64 x 5 x 3 x 175 = 1,008,000
auto=$(timed "$PIPETWIN" sweep "${COMMON[@]}" "${big[@]}" --out "$TMP/big.csv")
n=$(($(wc -l < "$TMP/big.csv") - 1))
printf "%d configurations, --engine auto: %.1f s (%.0f/s); at the SimGrid rate above it would take %.0f s\n" \
  "$n" "$auto" "$(calc "$n / $auto")" "$(calc "$n * $sg / $(($(wc -l < "$TMP/simgrid.csv") - 1))")"
tail -n +2 "$TMP/big.csv" | cut -d, -f7,12 | sort | uniq -c | sed 's/^/  status,engine /'
