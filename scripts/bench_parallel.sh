#!/usr/bin/env bash
# Data and tensor parallelism against PyTorch's own, side by side in one run
# on this machine, same Transformer (examples/transformer-small.yaml), batch,
# micro-batches, Adam and threads (1 per process); medians over alternating
# repetitions; ratio = PyTorch's step / pipetwin's (> 1: pipetwin faster):
#   (a) pipetwin run -k 1 -d 2 (each replica's gradients all-reduced over Gloo
#       at REDUCE_GRAD, one flat buffer after the last backward) against
#       DistributedDataParallel (bench/ddp_baseline.py: buckets reduced during
#       the last micro-batch's backward);
#   (b) pipetwin run -k 1 -t 2 (Megatron-LM's split of every layer) against
#       torch.distributed.tensor.parallel (bench/tp_baseline.py: the blocks
#       split the same way, embedding and head replicated).
#   bash scripts/bench_parallel.sh        (about 6 minutes on 2 cores; REPS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
B="${PIPETWIN_BUILD_DIR:-build}"
PIPETWIN="$B/cli/pipetwin"
PY="${PIPETWIN_VENV:-$HOME/.cache/pipetwin/venv}/bin/python"
MODEL=examples/transformer-small.yaml
REPS="${REPS:-3}"
STEPS="${STEPS:-12}"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { "$PY" -c "import json,sys; j=json.load(sys.stdin); print($1)"; }

echo "(a) data parallelism, D=2 replicas of K=1 ($MODEL, 1 thread per process, median step over $STEPS steps, $REPS repetitions)"
printf "%-18s %10s %12s %8s\n" config ddp_s pipetwin_s ratio
port=29711
for m in 1 4; do
  batch=16
  theirs=() ours=()
  for _ in $(seq "$REPS"); do
    port=$((port + 1))
    theirs+=("$("$PY" bench/ddp_baseline.py --replicas 2 --microbatches "$m" --batch "$batch" --steps "$STEPS" --threads 1 \
      --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4 --port "$port" 2>/dev/null)")
    ours+=("$("$PIPETWIN" run --model "$MODEL" -s 1f1b -k 1 -d 2 -m "$m" --batch "$batch" --steps "$STEPS" --threads 1 \
      --json | field "j['summary']['step_time_s']")")
  done
  t=$(printf "%s\n" "${theirs[@]}" | median); o=$(printf "%s\n" "${ours[@]}" | median)
  printf "%-18s %10.4f %12.4f %8.3f\n" "M=$m batch=$batch" "$t" "$o" "$(awk -v a="$t" -v b="$o" 'BEGIN{print a/b}')"
done

echo
echo "(b) tensor parallelism, T=2 members of K=1 ($MODEL, 1 thread per process, median step over $STEPS steps, $REPS repetitions)"
printf "%-18s %10s %12s %8s\n" config torch_tp_s pipetwin_s ratio
for m in 1 4; do
  batch=16
  theirs=() ours=()
  for _ in $(seq "$REPS"); do
    port=$((port + 1))
    theirs+=("$("$PY" bench/tp_baseline.py --members 2 --microbatches "$m" --batch "$batch" --steps "$STEPS" --threads 1 \
      --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4 --port "$port" 2>/dev/null)")
    # The hardware prices only the partition (K = 1 here): a preset whose topology takes tensor groups.
    ours+=("$("$PIPETWIN" run --hardware a100 --model "$MODEL" -s 1f1b -k 1 -t 2 -m "$m" --batch "$batch" --steps "$STEPS" \
      --threads 1 --json | field "j['summary']['step_time_s']")")
  done
  t=$(printf "%s\n" "${theirs[@]}" | median); o=$(printf "%s\n" "${ours[@]}" | median)
  printf "%-18s %10.4f %12.4f %8.3f\n" "M=$m batch=$batch" "$t" "$o" "$(awk -v a="$t" -v b="$o" 'BEGIN{print a/b}')"
done
