#!/usr/bin/env bash
# Execution benchmarks, measured side by side in one run on this machine (a
# small Transformer, examples/transformer-small.yaml), medians over
# alternating repetitions:
#   (a) pipetwin run -k 1 against a plain LibTorch loop on the same model
#       (bench/plain_loop.cpp): the executor's overhead; the loop runs each
#       micro-batch's forward then its backward, so pipetwin runs the schedule
#       with that order (1f1b; at K = 1 gpipe would run every forward first and
#       hold M micro-batches of activations, another computation);
#   (b) pipetwin run against PyTorch's torch.distributed.pipelining
#       (ScheduleGPipe / Schedule1F1B, Gloo; bench/pipelining_baseline.py)
#       with the same model, partition, K, M, batch and threads: throughput ratio;
#   (c) pipeline efficiency of those runs: the step the schedule allows on the
#       measured per-stage times (transfers free) over the measured step.
#   bash scripts/bench_exec.sh            (about 10 minutes on 2 cores; REPS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
cmake --build "${PIPETWIN_BUILD_DIR:-build}" --target plain_loop >/dev/null
B="${PIPETWIN_BUILD_DIR:-build}"
PIPETWIN="$B/cli/pipetwin"
PY="${PIPETWIN_VENV:-$HOME/.cache/pipetwin/venv}/bin/python"
MODEL=examples/transformer-small.yaml
REPS="${REPS:-3}"
STEPS="${STEPS:-12}"
CORES=$(nproc)

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { "$PY" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

echo "(a) executor overhead: pipetwin run -k 1 vs a plain LibTorch loop ($MODEL, $CORES threads, median step over $STEPS steps, $REPS repetitions)"
printf "%-14s %12s %12s %10s\n" config plain_s pipetwin_s overhead
for m in 1 4; do
  batch=16
  plain=() ours=()
  for _ in $(seq "$REPS"); do
    plain+=("$("$B/bench/plain_loop" "$MODEL" "$m" "$batch" "$STEPS" "$CORES")")
    ours+=("$("$PIPETWIN" run --model "$MODEL" -s 1f1b -k 1 -m "$m" --batch "$batch" --steps "$STEPS" --threads "$CORES" --json | field "j['summary']['step_time_s']")")
  done
  p=$(printf "%s\n" "${plain[@]}" | median); o=$(printf "%s\n" "${ours[@]}" | median)
  printf "%-14s %12.4f %12.4f %9.1f%%\n" "M=$m batch=$batch" "$p" "$o" "$(awk -v a="$o" -v b="$p" 'BEGIN{print 100*(a/b-1)}')"
done

echo
echo "(b) throughput against torch.distributed.pipelining, and (c) pipeline efficiency (K=2, 1 thread per rank)"
printf "%-22s %12s %12s %8s %11s\n" config torch_s pipetwin_s ratio efficiency
port=29611
for sched in gpipe 1f1b; do
  for m in 4 8; do
    batch=$((4 * m))
    torch=() ours=() eff=()
    json=$("$PIPETWIN" run --model "$MODEL" -s "$sched" -k 2 -m "$m" --batch "$batch" --steps 2 --threads 1 --json)
    partition=$(echo "$json" | field "','.join(f'{a}:{b}' for a, b in j['partition'])")
    for _ in $(seq "$REPS"); do
      port=$((port + 1))
      torch+=("$("$PY" bench/pipelining_baseline.py --schedule "$sched" --ranks 2 --microbatches "$m" --batch "$batch" \
        --steps "$STEPS" --threads 1 --partition "$partition" --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 \
        --layers 4 --port "$port" 2>/dev/null)")
      json=$("$PIPETWIN" run --model "$MODEL" -s "$sched" -k 2 -m "$m" --batch "$batch" --steps "$STEPS" --threads 1 --json)
      ours+=("$(echo "$json" | field "j['summary']['step_time_s']")")
      eff+=("$(echo "$json" | field "j['measured']['pipeline_efficiency']")")
    done
    t=$(printf "%s\n" "${torch[@]}" | median); o=$(printf "%s\n" "${ours[@]}" | median); e=$(printf "%s\n" "${eff[@]}" | median)
    printf "%-22s %12.4f %12.4f %8.3f %11.3f\n" "$sched M=$m batch=$batch" "$t" "$o" "$(awk -v a="$t" -v b="$o" 'BEGIN{print a/b}')" "$e"
  done
done
