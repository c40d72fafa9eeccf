#!/usr/bin/env bash
# The main job: the whole twin loop on this machine's CPU with a small
# Transformer (examples/transformer-small.yaml), into out/ (PIPETWIN_OUT):
#   1. the schedule, and a K x M sweep predicted with the uncalibrated `cpu` preset,
#   2. a few configurations run for real (LibTorch, one process per rank, Gloo),
#   3. a calibration fitted on some of those runs,
#   4. the others (held out) predicted again with the calibrated hardware, and
#      compared with their measurements action by action,
#   5. a calibrated sweep, the plots, and out/report/report.md.
# Installs what is missing and builds first. Progress goes to stdout, one
# line per stage and per run.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
PIPETWIN="${PIPETWIN_BUILD_DIR:-build}/cli/pipetwin"
OUT="${PIPETWIN_OUT:-out}"
MODEL=examples/transformer-small.yaml
BATCH=16
STEPS="${PIPETWIN_DEMO_STEPS:-9}"  # 7 counted (2 warm-up): an odd count, so the traced step is their median
# Runs per configuration: the calibration fits all of them, the held-out
# configurations are measured by their median run, and their spread (the
# machine's pace drifts from run to run by more than one run's steps show)
# bounds what a comparison can tell.
REPEATS="${PIPETWIN_DEMO_REPEATS:-5}"
# Then the configurations whose median step is not known to within PRECISION
# (95%, relative; from their runs' spread) run again, two more rounds at a
# time, up to MAX_REPEATS runs each: a comparison against a median known to
# +-30% tells little either way, and a calibration whose one-rank runs fell
# mostly in one of the host's paces predicts every one-rank step off by it
# (docs/calibration.md, "Runs of one rank, the host's two paces").
PRECISION="${PIPETWIN_DEMO_PRECISION:-0.10}"
MAX_REPEATS="${PIPETWIN_DEMO_MAX_REPEATS:-9}"
rm -rf "$OUT/runs" "$OUT/predicted" "$OUT/compare" "$OUT/report" "$OUT"/sweep_cpu.csv* "$OUT"/sweep_calibrated.csv*
mkdir -p "$OUT/runs" "$OUT/predicted" "$OUT/compare" "$OUT/report"

# schedule:K:M:recompute. The calibration set spans one, two and four ranks,
# several micro-batch sizes, both schedules and recompute; the held-out set
# is predicted from it. One rank at micro-batch sizes 16, 4 and 1: the curves'
# anchor, where two ranks on the cores also slow each other's lone actions
# (docs/calibration.md, slow periods). Two runs with more ranks than this machine's cores:
# how ranks share cores is fitted on them, and one alone (its two dozen sends)
# once made every send of K = 4 wait 0.9 ms, K=4 M=8 predicted 22% slow.
# One zero-bubble run (zb-h1) runs each backward as I and W apart: W's share
# of the backward is fitted on it, and two held out (zb-h1 at another M, and
# zb-v, two stages a rank) are predicted with it, I and W each compared.
CALIBRATE=(1f1b:1:1:none gpipe:1:4:none gpipe:1:16:none 1f1b:2:2:none gpipe:2:4:full 1f1b:2:16:none 1f1b:4:4:none gpipe:4:16:none
  zb-h1:2:4:none)
HELD_OUT=(1f1b:2:8:none gpipe:2:8:none 1f1b:2:4:full gpipe:1:8:none 1f1b:4:8:none zb-h1:2:8:none zb-v:2:8:none)

STAGES=7
stage=0
started=$SECONDS
say() {
  stage=$((stage + 1))
  printf '\n[%d/%d, %3ds] %s\n' "$stage" "$STAGES" $((SECONDS - started)) "$*"
}
name_of() { IFS=: read -r s k m r <<<"$1"; echo "${s}_k${k}_m${m}_${r}"; }
args_of() { IFS=: read -r s k m r <<<"$1"; echo "--model $MODEL -s $s -k $k -m $m --batch $BATCH --recompute $r"; }

say "the schedule: 1f1b, K=2, M=8, unit-time dry run"
"$PIPETWIN" schedule --schedule 1f1b --ranks 2 --microbatches 8 --format grid | tail -n 5
"$PIPETWIN" schedule --schedule 1f1b --ranks 2 --microbatches 8 --format csv --out "$OUT/1f1b_k2_m8.csv"

say "predict K in {1,2,4} x M in {1,2,4,8,16}, gpipe and 1f1b, with the uncalibrated cpu preset"
"$PIPETWIN" sweep --model "$MODEL" --hardware cpu --ranks 1,2,4 --microbatches 1,2,4,8,16 --schedules gpipe,1f1b \
  --batch "$BATCH" --out "$OUT/sweep_cpu.csv" | tail -n 1

say "run ${#CALIBRATE[@]} + ${#HELD_OUT[@]} configurations for real, $REPEATS times each ($STEPS steps, 1 thread per rank), up to $MAX_REPEATS where the runs spread"
# In rounds (every configuration once, then again), so that the machine's
# drift spreads over all of them; each configuration's median run is kept.
all=("${CALIBRATE[@]}" "${HELD_OUT[@]}")
run_config() {  # configuration, repeat, label
  local n
  n=$(name_of "$1")
  # shellcheck disable=SC2046
  "$PIPETWIN" run $(args_of "$1") --steps "$STEPS" --threads 1 --trace "$OUT/runs/${n}_r$2.json" \
    --summary "$OUT/runs/${n}_r$2.summary.json" >"$OUT/runs/${n}_r$2.txt"
  printf '  run %-9s %-22s %s%s\n' "$3" "$n" "$(grep '^step time' "$OUT/runs/${n}_r$2.txt")" \
    "$(grep -q 'the machine was busy' "$OUT/runs/${n}_r$2.txt" && echo '   (busy machine)')"
}
# The host's cores, probed before and after the runs: whether it gives two
# processes two cores' pace (it may not, and /proc/stat need not show it).
probe() { "$PIPETWIN" probe --rounds 10 --quiet --json "$OUT/runs/probe_$1.json" | sed -n "s/^/  probe $1: /p"; }
probe before
i=0
for rep in $(seq 1 "$REPEATS"); do
  for c in "${all[@]}"; do
    i=$((i + 1))
    run_config "$c" "$rep" "$i/$((${#all[@]} * REPEATS))"
  done
done
all_names=()
for c in "${all[@]}"; do all_names+=("$(name_of "$c")"); done
# Two more rounds at a time: an odd count of runs has a median run (the
# comparison's trace).
rep=$REPEATS
while [ $((rep + 2)) -le "$MAX_REPEATS" ]; do
  mapfile -t wide < <(python3 scripts/wide_repeats.py "$OUT/runs" "$PRECISION" "$MAX_REPEATS" "${all_names[@]}")
  [ "${#wide[@]}" -gt 0 ] || break
  echo "  their median not yet known to +-$(awk -v p="$PRECISION" 'BEGIN { printf "%g", 100 * p }')%: ${wide[*]}"
  for _ in 1 2; do
    rep=$((rep + 1))
    for c in "${all[@]}"; do
      for w in "${wide[@]}"; do
        if [ "$(name_of "$c")" = "$w" ]; then run_config "$c" "$rep" "repeat $rep"; fi
      done
    done
  done
done
probe after
# Each configuration's median quiet repeat, its quiet ones and the others.
python3 scripts/quiet_median.py "$OUT/runs" "${all_names[@]}"

traces=()
for c in "${CALIBRATE[@]}"; do mapfile -t -O "${#traces[@]}" traces <"$OUT/runs/$(name_of "$c").quiet"; done
say "calibrate on ${#CALIBRATE[@]} configurations (${#traces[@]} runs: their repeats measured on a quiet machine, or all where none was)"
"$PIPETWIN" calibrate "${traces[@]}" --hardware cpu --out "$OUT/cpu-calibrated.yaml" | sed -n "/^noise floor/p;/^note/p"

say "predict the ${#HELD_OUT[@]} held-out configurations with the calibrated hardware and compare"
compares=()
for c in "${HELD_OUT[@]}"; do
  n=$(name_of "$c")
  # The partition the run used (the calibrated costs may balance the layers
  # differently): the prediction is of the same IR.
  python3 scripts/trace_partition.py "$OUT/runs/$n.json" >"$OUT/predicted/$n.partition"
  # shellcheck disable=SC2046
  "$PIPETWIN" simulate $(args_of "$c") --hardware "$OUT/cpu-calibrated.yaml" --partition "$OUT/predicted/$n.partition" \
    --trace "$OUT/predicted/$n.json" >/dev/null
  mapfile -t repeats <"$OUT/runs/$n.repeats"
  more=()
  [ "${#repeats[@]}" -gt 0 ] && more=(--repeats "${repeats[@]}")
  "$PIPETWIN" compare "$OUT/predicted/$n.json" "$OUT/runs/$n.json" "${more[@]}" --json >"$OUT/compare/$n.json"
  "$PIPETWIN" compare "$OUT/predicted/$n.json" "$OUT/runs/$n.json" "${more[@]}" | sed -n 's/^step time/  '"$n"': step time/p'
  # A zero-bubble run's two halves of the backward, each summed over the step.
  python3 - "$OUT/compare/$n.json" "$n" <<'PY'
import json, sys
kinds = {k["kind"]: k for k in json.load(open(sys.argv[1]))["op_kinds"]}
if "I" in kinds and "W" in kinds:
    def err(k):
        return "%+.1f%%" % (100 * kinds[k]["total_relative_error"])
    print("  %s: I %s, W %s (their durations summed over the step)" % (sys.argv[2], err("I"), err("W")))
PY
  compares+=("$OUT/compare/$n.json")
done

say "sweep again with the calibrated hardware"
"$PIPETWIN" sweep --model "$MODEL" --hardware "$OUT/cpu-calibrated.yaml" --ranks 1,2,4 --microbatches 1,2,4,8,16 \
  --schedules gpipe,1f1b --batch "$BATCH" --out "$OUT/sweep_calibrated.csv" | tail -n 1

say "plots and the report"
R="$OUT/report"
gantt=$(name_of "${HELD_OUT[0]}")
"$PIPETWIN" plot gantt "$OUT/predicted/$gantt.json" "$OUT/runs/$gantt.json" --out "$R/gantt" >/dev/null
measured=()
for c in "${all[@]}"; do
  IFS=: read -r s _ _ r <<<"$c"
  [ "$s" = 1f1b ] && [ "$r" = none ] && measured+=("$OUT/runs/$(name_of "$c").summary.json")
done
"$PIPETWIN" plot bubble "$OUT/sweep_calibrated.csv" --schedule 1f1b --batch "$BATCH" --measured "${measured[@]}" --out "$R/bubble" >/dev/null
"$PIPETWIN" plot heatmap "$OUT/sweep_calibrated.csv" --schedule 1f1b --batch "$BATCH" --metric throughput --out "$R/heatmap" >/dev/null
"$PIPETWIN" plot memory "$OUT/runs/$gantt.json" --out "$R/memory" >/dev/null
"$PIPETWIN" plot report --compare "${compares[@]}" --calibrated-on "$(printf '%s ' "${CALIBRATE[@]}")" \
  --probe "$OUT/runs/probe_before.json" "$OUT/runs/probe_after.json" \
  --image "Predicted (calibrated) above measured: $gantt=$R/gantt.png" \
  --image "Bubble against M, calibrated prediction, measurements and (K-1)/(M+K-1)=$R/bubble.png" \
  --image "Throughput over K x M, calibrated prediction (1f1b)=$R/heatmap.png" \
  --image "Memory per stage, $gantt=$R/memory.png" \
  --title "pipetwin on this machine: transformer-small, predicted against measured" --out "$R/report" >/dev/null
# Its figures, and what the runs' noise alone would make of them.
sed -n '/^Step time: /p;/^What the noise alone would show/p;/comparisons are not meaningful/p;/^No comparison is meaningful/p' "$R/report.md"
printf '\nreport: %s (with %s)\n' "$R/report.md" "$(cd "$R" && printf '%s ' ./*.png)"
