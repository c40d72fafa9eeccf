# shellcheck shell=bash disable=SC2153,SC2154
# The tensor- and data-parallel section of scripts/bench_fidelity.sh (sourced by it, after
# its pipeline section: PIPETWIN, OUT, MODEL, BATCH, STEPS, REPEATS and the
# `calibrate` array of its calibration traces are set; prio and traced_run
# from bench_lib.sh).
#
# Runs the same model with D = 2 replicas (pipetwin run -d 2: twice the
# processes, the batch split between the replicas, REDUCE_GRAD all-reducing
# each stage's gradients over Gloo), with ZeRO-1 off and on, and with tensor
# groups of T = 2 (pipetwin run -t 2: Megatron's split, its all-reduces inside
# the actions), over K in {1, 2} x M in {1, 2, 4, 8} x {gpipe, 1f1b};
# calibrates on the pipeline section's calibration runs (T = D = 1: the
# device) plus these runs with M in {1, 4} (the data group's rounds from the
# reductions, the tensor group's from the seconds each process recorded in
# its collectives); predicts the
# held-out ones (M in {2, 8}) with simulate -t/-d --collective ring (Gloo's
# all-reduce is a ring); prints per configuration the step error and the
# collectives' own error (predicted against measured REDUCE_GRAD per stage,
# and the tensor group's seconds per rank), then medians and worst.
#
# FIDELITY_PARALLEL=0 leaves the section out; FIDELITY_PARALLEL_REPEATS (default
# FIDELITY_REPEATS) runs per configuration, the median one by step time used.
# A variant's options: d2_zero1off, d2_zero1on, t2.
variant() {
  case $1 in
    d2_zero1off) echo "-d 2" ;;
    d2_zero1on) echo "-d 2 --zero1" ;;
    t2) echo "-t 2" ;;
  esac
}

fidelity_parallel() {
  local DOUT="$OUT/parallel" S K M Z name args opts c rep n
  mkdir -p "$DOUT/runs" "$DOUT/predicted"
  local -a pconfigs=() pcal=() pheld=()
  for K in 1 2; do
    for M in 1 2 4 8; do
      for S in gpipe 1f1b; do
        for Z in d2_zero1off d2_zero1on t2; do pconfigs+=("$S $K $M $Z"); done
      done
    done
  done
  local PREPEATS="${FIDELITY_PARALLEL_REPEATS:-$REPEATS}"
  n=0
  for rep in $(seq 1 "$PREPEATS"); do
    for c in "${pconfigs[@]}"; do
      n=$((n + 1))
      read -r S K M Z <<<"$c"
      name="${S}_k${K}_m${M}_${Z}"
      read -ra opts <<<"$(variant "$Z")"
      args=(--model "$MODEL" -s "$S" -k "$K" -m "$M" "${opts[@]}" --batch "$BATCH" --steps "$STEPS" --threads 1)
      traced_run "$DOUT/runs/${name}_r${rep}.json" \
        "$(printf "[%3d/%d] run %-26s repeat %d" "$n" "$((${#pconfigs[@]} * PREPEATS))" "$name" "$rep")" "${args[@]}" || {
        cat "$DOUT/runs/${name}_r${rep}.log" >&2
        exit 1
      }
    done
  done
  python3 scripts/median_repeat.py "$DOUT/runs"
  for c in "${pconfigs[@]}"; do
    read -r S K M Z <<<"$c"
    name="${S}_k${K}_m${M}_${Z}"
    if [ "$M" = 1 ] || [ "$M" = 4 ]; then pcal+=("$DOUT/runs/$name.json"); else pheld+=("$c"); fi
  done
  echo
  echo "tensor and data parallelism (T or D = 2): calibrate on the ${#calibrate[@]} pipeline runs and ${#pcal[@]} parallel runs (M in {1,4}), predict ${#pheld[@]} held out"
  "$PIPETWIN" calibrate "${calibrate[@]}" "${pcal[@]}" --hardware cpu --out "$DOUT/calibrated.yaml" >"$DOUT/calibrate.txt"
  grep -E '^collectives|^tensor|^  reduce_grad|^  tp_collectives|collective' "$DOUT/calibrate.txt" || true
  for c in "${pheld[@]}"; do
    read -r S K M Z <<<"$c"
    name="${S}_k${K}_m${M}_${Z}"
    read -ra opts <<<"$(variant "$Z")"
    args=(--model "$MODEL" --hardware "$DOUT/calibrated.yaml" -s "$S" -k "$K" -m "$M" "${opts[@]}" --batch "$BATCH"
      --collective ring --trace "$DOUT/predicted/$name.json" --json)
    python3 scripts/trace_partition.py "$DOUT/runs/$name.json" >"$DOUT/predicted/$name.partition"
    "$PIPETWIN" simulate "${args[@]}" --partition "$DOUT/predicted/$name.partition" >"$DOUT/predicted/$name.summary.json"
  done
  local -a names=()
  for c in "${pheld[@]}"; do
    read -r S K M Z <<<"$c"
    names+=("${S}_k${K}_m${M}_${Z}")
  done
  python3 scripts/fidelity_parallel.py "$DOUT" "${names[@]}"
}
