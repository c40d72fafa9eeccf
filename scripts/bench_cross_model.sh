#!/usr/bin/env bash
# Fidelity across models: calibrate on one model, predict others held out.
#
# The case "before buying hardware": the user can measure one device, or one
# model's pipeline, not the pipeline they plan. Two calibrations, each used
# to predict models it never saw:
#
#   A  pipetwin calibrate on transformer-small's own pipeline runs
#      (K in {1,2,4} x M in {1,4,16} x {gpipe,1f1b}, recompute none);
#   B  pipetwin calibrate --microbench --model TARGET alone: the target
#      model's short one- and two-rank runs, no pipeline run of it at all;
#      one pass of them in each of the first repeats and in each later
#      round that runs the model again, beside the held-out runs (an hour's
#      drift of the machine then lands on both), fitted all together.
#
# Held out: examples/mlp-small.yaml, examples/resnet-small.yaml,
# examples/transformer-wide.yaml and examples/llama-small.yaml (family: llm,
# layer kinds transformer-small has none of), each run for real over K in {1,2,4} x
# M in {2,8} x {gpipe,1f1b} (batch 16, one thread per rank), predicted by
# `simulate --hardware CALIBRATED.yaml` on the partition each run used. Prints
# per configuration the measured and predicted step times under A and B, the
# measurement's noise (the median run's steps, and its median's 95% interval
# over the repeats; compare's verdict, with the other repeats, under A and B),
# then per model and overall the median and worst errors (aim: median <= 7%,
# worst <= 15%) with the verdicts counted, and what a model without error
# would read with that noise (plots/report.py's noise_alone over the repeats'
# intervals).
#
#   bash scripts/bench_cross_model.sh       (45 to 75 minutes on 2 cores:
#                                            three rounds, then the wide ones)
#
# Environment: PIPETWIN_BUILD_DIR (default build), CROSS_OUT (default
# out/cross-model; runs already there are reused, so a second call only
# recalibrates and predicts), CROSS_REPEATS (runs per configuration,
# interleaved; the median repeat by step time is used; default 3),
# CROSS_PRECISION and CROSS_MAX_REPEATS (then two more runs at a time of
# each configuration whose median is not known to +-PRECISION, up to
# MAX_REPEATS runs, as scripts/demo.sh; defaults 0.10 and 9; runs already
# there count), CROSS_STEPS (default 12), CROSS_MODELS (default "mlp-small resnet-small
# transformer-wide llama-small"), CROSS_MICROBENCH=0 to leave calibration B out,
# PIPETWIN_SKIP_BUILD=1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PIPETWIN_SKIP_BUILD:-}" ] || bash scripts/build.sh
PIPETWIN="${PIPETWIN_BUILD_DIR:-build}/cli/pipetwin"
OUT="${CROSS_OUT:-out/cross-model}"
REPEATS="${CROSS_REPEATS:-3}"
PRECISION="${CROSS_PRECISION:-0.10}"
MAX_REPEATS="${CROSS_MAX_REPEATS:-9}"
STEPS="${CROSS_STEPS:-12}"
MODELS="${CROSS_MODELS:-mlp-small resnet-small transformer-wide llama-small}"
BATCH=16
mkdir -p "$OUT/runs" "$OUT/predicted"
# shellcheck disable=SC2034  # read by scripts/bench_lib.sh
BENCH_PRIORITY="${CROSS_PRIORITY:-1}"
# shellcheck source=scripts/bench_lib.sh
# shellcheck source=scripts/bench_lib.sh disable=SC1091
source scripts/bench_lib.sh

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
configs=()  # "model schedule K M"
for K in 1 2 4; do
  for M in 1 4 16; do
    for S in gpipe 1f1b; do configs+=("transformer-small $S $K $M"); done
  done
done
held=()
for model in $MODELS; do
  for K in 1 2 4; do
    for M in 2 8; do
      for S in gpipe 1f1b; do
        configs+=("$model $S $K $M")
        held+=("${model}_${S}_k${K}_m${M}")
      done
    done
  done
done

run_one() {  # model S K M repeat index total
  local name="${1}_${2}_k${3}_m${4}"
  traced_run "$OUT/runs/${name}_r${5}.json" "$(printf "[%3d/%d] run %-32s repeat %d" "$6" "$7" "$name" "$5")" \
    --model "examples/$1.yaml" -s "$2" -k "$3" -m "$4" --batch "$BATCH" --steps "$STEPS" --threads 1 || {
    cat "$OUT/runs/${name}_r${5}.log" >&2
    exit 1
  }
}
# B's microbenchmarks of one model, one pass of them (reused where already there).
microbench_pass() {  # model repeat
  local dir="$OUT/microbench-$1/r$2"
  [ -s "$dir.yaml" ] && return
  echo "B: calibrate --microbench --model examples/$1.yaml (repeat $2)"
  prio "$PIPETWIN" calibrate --microbench --model "examples/$1.yaml" --threads 1 --hardware cpu \
    --microbench-dir "$dir" --out "$dir.yaml" >"$dir.txt"
}
# Repeat by repeat, every configuration once in each, and one pass of each
# target's microbenchmarks with them: a slow spell of the machine lands on one
# repeat of several configurations, not on all of one's, and an hour's drift
# on calibration B's runs and on the runs it predicts alike.
n=0
for rep in $(seq 1 "$REPEATS"); do
  if [ "${CROSS_MICROBENCH:-1}" != 0 ]; then
    for model in $MODELS; do
      mkdir -p "$OUT/microbench-$model"
      microbench_pass "$model" "$rep"
    done
  fi
  for c in "${configs[@]}"; do
    n=$((n + 1))
    # shellcheck disable=SC2086
    run_one $c "$rep" "$n" "$((${#configs[@]} * REPEATS))"
  done
done

# Then, as the demo does, two more runs of each configuration whose median
# is not yet known to +-PRECISION (95%, over its repeats), round after round,
# up to MAX_REPEATS runs: with three, a model without error, so measured,
# would miss the aim in most such benches (the last line below). Each such
# round runs one more pass of the microbenchmarks of each model it runs
# again, so that calibration B follows the host's pace as the runs do.
all_names=()
for c in "${configs[@]}"; do
  read -r model S K M <<<"$c"
  all_names+=("${model}_${S}_k${K}_m${M}")
done
rep=$REPEATS
while [ $((rep + 2)) -le "$MAX_REPEATS" ]; do
  mapfile -t wide < <(python3 scripts/wide_repeats.py "$OUT/runs" "$PRECISION" "$MAX_REPEATS" "${all_names[@]}")
  [ "${#wide[@]}" -gt 0 ] || break
  echo "their median not yet known to +-$(awk -v p="$PRECISION" 'BEGIN { printf "%g", 100 * p }')%: ${#wide[@]} configuration(s), two more runs each"
  if [ "${CROSS_MICROBENCH:-1}" != 0 ]; then
    for model in $MODELS; do
      for w in "${wide[@]}"; do
        if [ "${w%%_*}" = "$model" ]; then
          microbench_pass "$model" "$((rep + 1))"
          break
        fi
      done
    done
  fi
  for _ in 1 2; do
    rep=$((rep + 1))
    i=0
    for n in "${!configs[@]}"; do
      for w in "${wide[@]}"; do
        if [ "${all_names[$n]}" = "$w" ]; then
          i=$((i + 1))
          # shellcheck disable=SC2086
          run_one ${configs[$n]} "$rep" "$i" "${#wide[@]}"
        fi
      done
    done
  done
done

# The median repeat of each configuration (of an even count, the faster middle one).
python3 scripts/median_repeat.py "$OUT/runs"

# A: transformer-small's pipeline runs.
calibration_runs=()
for c in "${configs[@]}"; do
  read -r model S K M <<<"$c"
  [ "$model" = transformer-small ] && calibration_runs+=("$OUT/runs/${model}_${S}_k${K}_m${M}.json")
done
echo "A: calibrate on ${#calibration_runs[@]} runs of transformer-small"
"$PIPETWIN" calibrate "${calibration_runs[@]}" --hardware cpu --out "$OUT/A.yaml" >"$OUT/A.txt"
# B: each target's microbenchmarks alone, every pass of them.
if [ "${CROSS_MICROBENCH:-1}" != 0 ]; then
  for model in $MODELS; do
    passes=("$OUT/microbench-$model"/r*/)
    echo "B: calibrate on ${#passes[@]} pass(es) of the microbenchmarks of $model"
    "$PIPETWIN" calibrate "$OUT/microbench-$model"/r*/*.json --hardware cpu --out "$OUT/B-$model.yaml" >"$OUT/B-$model.txt"
  done
fi

for name in "${held[@]}"; do
  model=${name%%_*}
  rest=${name#*_}
  read -r S K M <<<"${rest//_/ }"
  K=${K#k}
  M=${M#m}
  python3 scripts/trace_partition.py "$OUT/runs/$name.json" >"$OUT/predicted/$name.partition"
  for cal in A B; do
    hw="$OUT/A.yaml"
    [ "$cal" = B ] && hw="$OUT/B-$model.yaml"
    [ -s "$hw" ] || continue
    # Its notes (a kind the calibration has no curve of) once each, below.
    "$PIPETWIN" simulate --model "examples/$model.yaml" --hardware "$hw" -s "$S" -k "$K" -m "$M" --batch "$BATCH" \
      --partition "$OUT/predicted/$name.partition" --trace "$OUT/predicted/$name.$cal.json" --json \
      >"$OUT/predicted/$name.$cal.summary.json" 2>"$OUT/predicted/$name.$cal.notes" || {
      cat "$OUT/predicted/$name.$cal.notes" >&2
      exit 1
    }
  done
  # The other repeats than the median one: their spread is the measurement's
  # noise from run to run, against which compare judges each error.
  others=()
  for f in "$OUT/runs/${name}"_r*.json; do
    [[ $f =~ _r[0-9]+\.json$ ]] && ! cmp -s "$f" "$OUT/runs/$name.json" && others+=("$f")
  done
  more=()
  [ "${#others[@]}" -gt 0 ] && more=(--repeats "${others[@]}")
  for cal in A B; do
    [ -s "$OUT/predicted/$name.$cal.json" ] || continue
    "$PIPETWIN" compare --json "$OUT/predicted/$name.$cal.json" "$OUT/runs/$name.json" "${more[@]}" \
      >"$OUT/predicted/$name.$cal.compare.json"
  done
done
find "$OUT/predicted" -name '*.notes' -exec cat {} + | sort -u
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "${held[@]}" <<'EOF'
import json, os, statistics, sys
sys.path.insert(0, "scripts")
sys.path.insert(0, "plots")
from trace_step import step_of  # one step as the simulator replays one
from wide_repeats import half_width, runs_of  # the median's 95% interval over the repeats
from report import noise_alone  # what a model without error would read, measured so
out, names = sys.argv[1], sys.argv[2:]
cals = [c for c in ("A", "B") if all(os.path.exists(f"{out}/predicted/{n}.{c}.summary.json") for n in names)]
errors = {c: {} for c in cals}  # calibration -> model -> [error %]
print(f"{'held-out configuration':<34} {'measured':>9} " + " ".join(f"{'pred ' + c:>9} {'error':>7}" for c in cals)
      + f"  {'median +-':>9} {'repeats +-':>10}  " + ", ".join(f"verdict ({c})" for c in cals))
known = []  # each configuration's median known to (95%, relative) over its repeats
verdicts = {c: {} for c in cals}  # calibration -> compare's verdict on the step -> rows
for name in names:
    model = name.split("_")[0]
    measured = step_of(f"{out}/runs/{name}.json")
    known.append(half_width([step_of(f) for f in runs_of(f"{out}/runs", name)]))
    row = f"{name:<34} {measured:9.4f} "
    for c in cals:
        p = json.load(open(f"{out}/predicted/{name}.{c}.summary.json"))["summary"]["step_time_s"]
        e = 100 * (p / measured - 1)
        errors[c].setdefault(model, []).append(e)
        row += f"{p:9.4f} {e:+6.1f}% "
    cmp = {c: json.load(open(f"{out}/predicted/{name}.{c}.compare.json")) for c in cals}
    noise = (cmp[cals[0]].get("noise") or {}) if cals else {}
    unc = noise.get("median_uncertainty_rel")
    row += f" {('%.1f%%' % (100 * unc)) if unc is not None else 'n/a':>9}"
    row += f" {('%.1f%%' % (100 * known[-1])) if known[-1] != float('inf') else 'n/a':>10}"
    for c in cals:
        verdict = cmp[c].get("verdict", {}).get("step_time", "unknown")
        verdicts[c][verdict] = verdicts[c].get(verdict, 0) + 1
        row += f"  {verdict:<13}"
    print(row.rstrip())
print()
label = {"A": "A (transformer-small's runs)", "B": "B (--microbench of the target only)"}
for c in cals:
    every = [abs(e) for es in errors[c].values() for e in es]
    per = "; ".join(f"{m} median {statistics.median(map(abs, es)):.1f}% worst {max(map(abs, es)):.1f}%"
                    for m, es in errors[c].items())
    print(f"{label[c]:<36} median {statistics.median(every):.1f}%  worst {max(every):.1f}%   ({per})")
    print(f"{'':<36} verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts[c].items(), key=lambda x: -x[1])))
print("aim: median <= 7%, worst <= 15%")
# The measurements' own share of those figures (plots/report.py's noise_alone).
n = noise_alone([{"known": k, "bubble_known": None} for k in known], step_aims=(0.07, 0.15))
if n:
    print(f"noise alone: a model without error, measured as these {n['configurations']} were (each median drawn "
          f"from its repeats' 95% interval), would read median {100 * n['median']:.1f}%, worst {100 * n['worst']:.1f}%, "
          f"and meet the aim in {100 * n['step_aims_met']:.0f}% of such runs")
EOF
