#!/usr/bin/env bash
# pipetwin's checks on a machine with one CUDA GPU, in parts:
#
#   scripts/gpu_check.sh OUT_DIR PART...
#
#   build     scripts/gpu_build.sh into build-gpu (pipetwin, pipetwin-exec,
#             test_exec_cuda); PIPETWIN_GPU_PREFIX (default /tmp/pipetwin-prefix)
#             and PIPETWIN_GPU_DEBS as gpu_build.sh reads them
#   test      test_exec_cuda: one rank against the CPU, every schedule over
#             NCCL on one GPU against one rank, a lost peer
#   memory    every schedule of `pipetwin schedule --list` on
#             examples/transformer-24.yaml, K=4 M=8 micro-batch 4 (the shape of
#             docs/benchmarks.md's 8 x H100 table), four ranks on the one GPU
#             (each its own NCCL_HOSTID), 2 Adam steps: each rank's peak of the
#             caching allocator against `simulate --hardware h100`'s peak of
#             that rank, and each stage's stash against the IR's
#             (GPU_CHECK_SCHEDULES=a,b: those generators only)
#   timing    one rank, transformer-24, gpipe: (M, micro-batch) (1, 4), (2, 2),
#             (4, 4) for `pipetwin calibrate --hardware h100`, then (8, 4),
#             (8, 2), (2, 8) held out; each run predicted by the h100 preset
#             as shipped and by the calibrated file
#
# Everything lands in OUT_DIR (logs, JSON summaries, traces, the calibrated
# file) and OUT_DIR/gpu_check.txt holds the tables. Several ranks on one GPU
# share its compute: the memory part measures memory, not time.
# GPU_CHECK_DEVICE=cpu, GPU_CHECK_MODEL=FILE and GPU_CHECK_BUILD=build try
# the memory and timing parts' plumbing on a CPU first.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="${1:?usage: scripts/gpu_check.sh OUT_DIR PART...}"
shift
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${GPU_CHECK_BUILD:-build-gpu}"
PT="$BUILD/cli/pipetwin"
MODEL="${GPU_CHECK_MODEL:-examples/transformer-24.yaml}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
# shellcheck disable=SC1091  # written by gpu_build.sh
env_sh() { if [ -f "$BUILD/env.sh" ]; then source "$BUILD/env.sh"; fi; }
REPORT="$OUT/gpu_check.txt"
say() { echo "$*" | tee -a "$REPORT"; }

part_build() {
  local t0=$SECONDS
  bash scripts/gpu_build.sh "${PIPETWIN_GPU_PREFIX:-/tmp/pipetwin-prefix}" "$BUILD" pipetwin pipetwin-exec test_exec_cuda \
    >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  say "build: $((SECONDS - t0)) s"
}

part_test() {
  env_sh
  local t0=$SECONDS rc=0
  timeout -k 5 "${GPU_CHECK_TEST_TIMEOUT:-600}" "$BUILD/tests/exec/test_exec_cuda" >"$OUT/test_exec_cuda.log" 2>&1 || rc=$?
  grep -E '^\[ cuda \]|^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/test_exec_cuda.log" | tee -a "$REPORT"
  say "test_exec_cuda: status $rc in $((SECONDS - t0)) s"
}

# Starts K ranks of one configuration by hand, each with its own NCCL_HOSTID
# (NCCL refuses two ranks of one communicator on one GPU otherwise), and
# waits for them; rank 0 writes the JSON summary.
run_ranks() {
  local k=$1 port=$2 name=$3
  shift 3
  local pids=() r
  for ((r = k - 1; r >= 0; r--)); do
    RANK=$r WORLD_SIZE=$k LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID="pipetwin-$name-$r" timeout -k 5 240 "$PT" run "$@" --device "$DEVICE" --timeout 120 \
      --summary "$OUT/memory/$name.r0.json" >"$OUT/memory/$name.r$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0 p
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

part_memory() {
  env_sh
  mkdir -p "$OUT/memory"
  local t0=$SECONDS port=29500 running=0
  mapfile -t GENS < <("$PT" schedule --list --json | python3 scripts/gpu_report.py generators)
  for g in "${GENS[@]}"; do
    read -r S V <<<"$g"
    port=$((port + 7))
    "$PT" simulate --model "$MODEL" --hardware h100 -s "$S" -k 4 -m 8 -v "$V" --batch 32 --json \
      >"$OUT/memory/$S.predicted.json"
    # Two configurations at a time: the largest (gpipe) holds about 76 GB.
    run_ranks 4 "$port" "$S" --model "$MODEL" --hardware h100 -s "$S" -k 4 -m 8 -v "$V" --batch 32 --steps 2 \
      --threads 2 || echo "$S: a rank failed (see $OUT/memory/$S.r*.log)" &
    running=$((running + 1))
    if ((running == 2)); then wait; running=0; fi
  done
  wait
  say "memory: $((SECONDS - t0)) s"
  python3 scripts/gpu_report.py memory "$OUT/memory" "${GENS[@]}" | tee -a "$REPORT"
}

part_timing() {
  env_sh
  mkdir -p "$OUT/timing"
  local t0=$SECONDS cfg m b
  local configs=("1 4" "2 2" "4 4" "8 4" "8 2" "2 8")
  for cfg in "${configs[@]}"; do
    read -r m b <<<"$cfg"
    timeout -k 5 240 "$PT" run --model "$MODEL" -s gpipe -k 1 -m "$m" --batch $((m * b)) --steps 6 --device "$DEVICE" \
      --hardware h100 --trace "$OUT/timing/m${m}_b${b}.json" --summary "$OUT/timing/m${m}_b${b}.summary.json" \
      >"$OUT/timing/m${m}_b${b}.log" 2>&1 || echo "run M=$m b=$b failed: $OUT/timing/m${m}_b${b}.log"
  done
  "$PT" calibrate "$OUT/timing/m1_b4.json" "$OUT/timing/m2_b2.json" "$OUT/timing/m4_b4.json" --hardware h100 \
    --out "$OUT/timing/calibrated.yaml" >"$OUT/timing/calibrate.log" 2>&1 || tail -5 "$OUT/timing/calibrate.log"
  for cfg in "${configs[@]}"; do
    read -r m b <<<"$cfg"
    for hw in h100 "$OUT/timing/calibrated.yaml"; do
      "$PT" simulate --model "$MODEL" --hardware "$hw" -s gpipe -k 1 -m "$m" --batch $((m * b)) --json \
        >"$OUT/timing/m${m}_b${b}.$(basename "$hw" .yaml).predicted.json" 2>/dev/null || true
    done
  done
  say "timing: $((SECONDS - t0)) s"
  python3 scripts/gpu_report.py timing "$OUT/timing" "${configs[@]}" | tee -a "$REPORT"
}

for part in "$@"; do
  case "$part" in
    build | test | memory | timing) "part_$part" ;;
    *) echo "unknown part: $part (build, test, memory, timing)" >&2; exit 2 ;;
  esac
done
