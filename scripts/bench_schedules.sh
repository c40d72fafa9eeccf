#!/usr/bin/env bash
# Every schedule generator, twice: simulated on 8 x H100, and run for real on
# this machine's CPU against the calibrated simulator.
#
# The generators are those of `pipetwin schedule --list --json`; the ones with
# several stages per rank run with V = 2 (--virtual 2 where V is free, the
# V-shaped ones' own 2). Each at (K=4, M=8) and (K=8, M=32); a shape a
# generator refuses (dualpipe-v needs M >= 2K) is a row saying so.
#
# Part h100 (simulation only, 3 s): examples/transformer-24.yaml on the h100
# preset, whose topology is all-to-all (NVSwitch, 450 GB/s per GPU and
# direction): K ranks are K GPUs of one host, so K = 8 is one 8-GPU node, and
# no hardware file is needed. One `pipetwin sweep` per shape (micro-batch size
# SCHEDULES_MBS, default 4: batch 4M, the largest power of two at which every
# generator fits in 80 GB at both shapes: gpipe's K=8 M=32 needs 45 GB on
# stage 0, and no split of it fits at 8), then `pipetwin simulate --json
# --trace` of each configuration for every stage's peak memory (the sweep's
# CSV holds only the largest) and the stage -> rank placement. Prints per
# configuration the step time, bubble, peak memory per stage (every stage up
# to 8 stages, min..max beyond), the worst rank's sum of its stages' peaks (an
# upper bound of its GPU's peak where it holds two stages; pipetwin checks
# each stage against the device's capacity) and the sweep's verdict.
#
# Part cpu: examples/transformer-24-narrow.yaml (transformer-24's depth,
# transformer-small's width) run for real here, one process per rank and one
# thread each. Calibrates (`pipetwin calibrate --hardware cpu`) on gpipe and
# 1f1b at K in {1,2,4} x M in {1,4}, batch 4 (micro-batches of 4 and 1).
# calibrate fits no I or W action (it refuses a set of I/W-split traces
# alone, and leaves their I and W out of a mixed set), so only gpipe and 1f1b
# runs join it; simulate splits the calibrated backward into I and W by their
# FLOPs. Then for every generator x shape: `pipetwin run` (batch 16 at M=8,
# micro-batches of 2; batch 32 at M=32, micro-batches of 1), `pipetwin
# simulate --hardware CALIBRATED.yaml` on the partition the run used, and
# `pipetwin compare --json`. Prints measured and predicted step
# (scripts/trace_step.py's step_of) and bubble (measured: the median of the
# run's steps' bubbles, the first left out), the error and compare's verdict
# on it (judged against the run's recorded noise), then the median and worst
# |error|. K = 8 on 2 cores is 8 processes sharing them.
#
#   bash scripts/bench_schedules.sh                         (both parts)
#   SCHEDULES_PART=h100 bash scripts/bench_schedules.sh     (3 s)
#   SCHEDULES_PART=cpu SCHEDULES_ONLY="gpipe zb-h1" SCHEDULES_SHAPES=4:8 \
#     bash scripts/bench_schedules.sh                       (a quick try: 12
#                       calibration runs and 2 others, 2 minutes on 2 cores)
#
# Environment: PIPETWIN_BUILD_DIR (default build), PIPETWIN_SKIP_BUILD=1,
# SCHEDULES_OUT (default out/schedules; the CPU part's runs already there are
# reused, so a second call only recalibrates, predicts and prints; the h100
# part is simulated afresh each time),
# SCHEDULES_PART (h100, cpu or both; default both), SCHEDULES_ONLY (a
# space-separated subset of the generators' names), SCHEDULES_SHAPES (K:M
# pairs, default "4:8 8:32"; K:M:BATCH sets the CPU runs' batch, by default 16
# where M divides 16, else M), SCHEDULES_MBS (the H100 part's micro-batch
# size, default 4), SCHEDULES_STEPS (steps per CPU run, default 6; the trace
# is the median step), SCHEDULES_CALIBRATE (the calibration runs' K:M pairs,
# default "1:1 1:4 2:1 2:4 4:1 4:4", each in gpipe and 1f1b at batch 4),
# SCHEDULES_PRIORITY=0 (run as they come: by default, as root, the CPU runs go
# in a session of their own at nice -15, as bench_fidelity.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PIPETWIN_SKIP_BUILD:-}" ] || bash scripts/build.sh
PIPETWIN="${PIPETWIN_BUILD_DIR:-build}/cli/pipetwin"
OUT="${SCHEDULES_OUT:-out/schedules}"
PART="${SCHEDULES_PART:-both}"
SHAPES="${SCHEDULES_SHAPES:-4:8 8:32}"
MBS="${SCHEDULES_MBS:-4}"
STEPS="${SCHEDULES_STEPS:-6}"
CALIBRATE="${SCHEDULES_CALIBRATE:-1:1 1:4 2:1 2:4 4:1 4:4}"
CAL_BATCH=4
H100_MODEL=examples/transformer-24.yaml
CPU_MODEL=examples/transformer-24-narrow.yaml
case "$PART" in h100 | cpu | both) ;; *) echo "SCHEDULES_PART: h100, cpu or both, not '$PART'" >&2; exit 2 ;; esac
# shellcheck disable=SC2034  # read by scripts/bench_lib.sh
BENCH_PRIORITY="${SCHEDULES_PRIORITY:-1}"
# shellcheck source=scripts/bench_lib.sh
# shellcheck source=scripts/bench_lib.sh disable=SC1091
source scripts/bench_lib.sh

# "name V" per generator, V the stages per rank it runs with here (2 where it
# has several), in --list's order, narrowed to SCHEDULES_ONLY.
mapfile -t GENERATORS < <("$PIPETWIN" schedule --list --json | python3 -c '
import json, sys
only = sys.argv[1].split()
gens = json.load(sys.stdin)
names = [g["name"] for g in gens]
unknown = [n for n in only if n not in names]
if unknown:
    sys.exit(f"SCHEDULES_ONLY: unknown generator(s) {unknown} (valid: {names})")
for g in gens:
    if not only or g["name"] in only:
        print(g["name"], 2 if g["virtual_stages"] else (g["fixed_stages_per_rank"] or 1))
' "${SCHEDULES_ONLY:-}")
[ "${#GENERATORS[@]}" -gt 0 ] || { echo "no generator to run" >&2; exit 1; }
vopt() { if [ "$1" -gt 1 ]; then echo "--virtual $1"; fi; }  # V -> the option that asks for it
shape_k() { cut -d: -f1 <<<"$1"; }
shape_m() { cut -d: -f2 <<<"$1"; }
cpu_batch() {  # K:M[:BATCH] -> the CPU runs' batch
  local m b
  m=$(shape_m "$1")
  b=$(cut -s -d: -f3 <<<"$1")
  if [ -n "$b" ]; then echo "$b"; elif [ $((16 % m)) = 0 ]; then echo 16; else echo "$m"; fi
}
# Whether the generator refuses the shape: its message then in FILE, else no FILE.
refused() {  # S V K M FILE
  # shellcheck disable=SC2046
  "$PIPETWIN" schedule -s "$1" -k "$3" -m "$4" $(vopt "$2") --format json >/dev/null 2>"$5" || return 0
  rm -f "$5"
  return 1
}

# ---------------------------------------------------------------- h100 ----
if [ "$PART" != cpu ]; then
  # Simulation only (seconds): always from scratch, so that a model change shows.
  rm -rf "$OUT/h100"
  mkdir -p "$OUT/h100/sim"
  names=$(printf '%s\n' "${GENERATORS[@]}" | cut -d' ' -f1 | paste -sd,)
  rows=()
  for shape in $SHAPES; do
    K=$(shape_k "$shape")
    M=$(shape_m "$shape")
    csv="$OUT/h100/sweep_k${K}_m${M}.csv"
    echo "h100: sweep K=$K M=$M, micro-batch size $MBS, $names -> $csv"
    CI=1 "$PIPETWIN" sweep --model "$H100_MODEL" --hardware h100 -k "$K" -m "$M" -s "$names" --virtual 2 \
      --microbatch-size "$MBS" --out "$csv"
    for g in "${GENERATORS[@]}"; do
      read -r S V <<<"$g"
      name="${S}_k${K}_m${M}_mbs${MBS}"
      rows+=("$S $V $K $M $name $csv")
      if ! refused "$S" "$V" "$K" "$M" "$OUT/h100/sim/$name.refused" && [ ! -s "$OUT/h100/sim/$name.summary.json" ]; then
        # shellcheck disable=SC2046
        "$PIPETWIN" simulate --model "$H100_MODEL" --hardware h100 -s "$S" -k "$K" -m "$M" $(vopt "$V") \
          --batch $((M * MBS)) --trace "$OUT/h100/sim/$name.json" --json >"$OUT/h100/sim/$name.summary.json" \
          2>"$OUT/h100/sim/$name.err" || rm -f "$OUT/h100/sim/$name.summary.json"  # e.g. no split fits
      fi
    done
  done
  echo
  echo "8 x H100 (h100 preset, all-to-all), $H100_MODEL, micro-batch size $MBS (batch = $MBS M), recompute none, adam"
  python3 - "$OUT/h100/sim" "${rows[@]}" <<'EOF'
import csv, json, os, sys
sim, rows = sys.argv[1], sys.argv[2:]
sweeps = {}
def sweep_row(path, schedule):
    if path not in sweeps:
        sweeps[path] = {r["schedule"]: r for r in csv.DictReader(open(path))}
    return sweeps[path].get(schedule)
def placement(trace):  # stage -> rank, from the Program the trace records
    for line in json.load(open(trace))["otherData"]["program"].splitlines():
        if line.startswith("stage_to_rank "):
            return [int(r) for r in line.split()[1:]]
print(f"{'schedule':<17} {'V':>1} {'K':>2} {'M':>3} {'batch':>5} {'step':>9} {'bubble':>7}  "
      f"{'peak memory per stage (GB)':<40} {'worst rank':>10}  fits")
for row in rows:
    S, V, K, M, name, path = row.split()
    r = sweep_row(path, S)
    head = f"{S:<17} {V:>1} {K:>2} {M:>3}"
    why = f"{sim}/{name}.refused"
    if os.path.exists(why):
        msg = open(why).read().strip().splitlines()[-1].replace("pipetwin: error: ", "")
        print(f"{head} {'':>5} {'':>9} {'':>7}  {'':<40} {'':>10}  refused: {msg}")
        continue
    if r is None:
        print(f"{head}  (no row in {path})")
        continue
    summary = f"{sim}/{name}.summary.json"
    if r["status"] == "error" or not r["step_time_s"] or not os.path.exists(summary):
        what = "does not fit" if r["status"] == "oom" else r["status"]
        print(f"{head} {r['batch']:>5} {'':>9} {'':>7}  {'':<40} {'':>10}  {what}: {r['reason']}")
        continue
    s = json.load(open(summary))["summary"]
    peaks = [m["peak_bytes"] / 1e9 for m in s["memory_per_stage"]]
    per_stage = " ".join(f"{p:.1f}" for p in peaks) if len(peaks) <= 8 else f"{min(peaks):.1f}..{max(peaks):.1f} ({len(peaks)} stages)"
    ranks = {}
    for stage, rank in enumerate(placement(f"{sim}/{name}.json")):
        ranks[rank] = ranks.get(rank, 0) + peaks[stage]
    worst = max(ranks.values())
    step, bubble = float(r["step_time_s"]), float(r["bubble_fraction"])
    # The sweep's and simulate's answers are the same configuration's.
    if abs(s["step_time_s"] / step - 1) > 1e-6 or abs(max(peaks) - float(r["max_stage_memory_gb"])) > 1e-3:
        print(f"warning: {name}: sweep and simulate disagree ({step} s / {s['step_time_s']} s)", file=sys.stderr)
    fits = "yes" if r["status"] == "ok" else f"does not fit: {r['reason']}"
    if r["status"] == "ok" and int(V) > 1 and worst > s["memory_per_stage"][0]["capacity_bytes"] / 1e9:
        fits += " (a rank's stages together exceed it)"
    print(f"{head} {r['batch']:>5} {1e3 * step:6.2f} ms {100 * bubble:6.1f}%  {per_stage:<40} {worst:7.1f} GB  {fits}")
EOF
  echo
fi

# ----------------------------------------------------------------- cpu ----
[ "$PART" != h100 ] || exit 0
CPU="$OUT/cpu"
mkdir -p "$CPU/calibration" "$CPU/runs" "$CPU/predicted"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
run_one() {  # S V K M BATCH TRACE LABEL: a real run, reused where its trace is there
  local trace=$6
  # shellcheck disable=SC2046
  traced_run "$trace" "$7" --model "$CPU_MODEL" -s "$1" -k "$3" -m "$4" $(vopt "$2") --batch "$5" --steps "$STEPS" \
    --threads 1 || {
    tail -5 "${trace%.json}.log" >&2
    rm -f "$trace"
    return 1
  }
}

calibration=()
n=0
total=$(($(wc -w <<<"$CALIBRATE") * 2))
for shape in $CALIBRATE; do
  K=$(shape_k "$shape")
  M=$(shape_m "$shape")
  for S in gpipe 1f1b; do
    n=$((n + 1))
    trace="$CPU/calibration/${S}_k${K}_m${M}_b${CAL_BATCH}.json"
    run_one "$S" 1 "$K" "$M" "$CAL_BATCH" "$trace" "[$n/$total] calibration run ${S} K=$K M=$M batch $CAL_BATCH" || exit 1
    calibration+=("$trace")
  done
done
echo "calibrate on ${#calibration[@]} runs (gpipe, 1f1b; K:M in $CALIBRATE; batch $CAL_BATCH) -> $CPU/calibrated.yaml"
"$PIPETWIN" calibrate "${calibration[@]}" --hardware cpu --out "$CPU/calibrated.yaml" >"$CPU/calibrate.txt"

rows=()
n=0
total=$((${#GENERATORS[@]} * $(wc -w <<<"$SHAPES")))
for shape in $SHAPES; do
  K=$(shape_k "$shape")
  M=$(shape_m "$shape")
  B=$(cpu_batch "$shape")
  for g in "${GENERATORS[@]}"; do
    read -r S V <<<"$g"
    n=$((n + 1))
    name="${S}_k${K}_m${M}_b${B}"
    rows+=("$S $V $K $M $B $name")
    refused "$S" "$V" "$K" "$M" "$CPU/runs/$name.refused" && continue
    run_one "$S" "$V" "$K" "$M" "$B" "$CPU/runs/$name.json" "[$n/$total] run $S K=$K M=$M V=$V batch $B" ||
      { echo "run failed: $CPU/runs/$name.log" >&2; continue; }
    python3 scripts/trace_partition.py "$CPU/runs/$name.json" >"$CPU/predicted/$name.partition"
    # shellcheck disable=SC2046
    "$PIPETWIN" simulate --model "$CPU_MODEL" --hardware "$CPU/calibrated.yaml" -s "$S" -k "$K" -m "$M" $(vopt "$V") \
      --batch "$B" --partition "$CPU/predicted/$name.partition" --trace "$CPU/predicted/$name.json" --json \
      >"$CPU/predicted/$name.summary.json"
    "$PIPETWIN" compare --json "$CPU/predicted/$name.json" "$CPU/runs/$name.json" >"$CPU/predicted/$name.compare.json"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "this machine's CPU ($(nproc) cores), $CPU_MODEL, one process per rank, one thread each, $STEPS steps;"
echo "predicted by simulate --hardware $CPU/calibrated.yaml on each run's partition"
python3 - "$CPU" "${rows[@]}" <<'EOF'
import json, os, statistics, sys
sys.path.insert(0, "scripts")
from trace_step import counted, step_of  # one step as the simulator replays one
cpu, rows = sys.argv[1], sys.argv[2:]
errors, bubble_errors = [], []
print(f"{'schedule':<17} {'V':>1} {'K':>2} {'M':>3} {'batch':>5} {'measured':>10} {'predicted':>10} {'error':>7}  "
      f"{'bubble m/p':>13}  verdict")
for row in rows:
    S, V, K, M, B, name = row.split()
    head = f"{S:<17} {V:>1} {K:>2} {M:>3} {B:>5}"
    why = f"{cpu}/runs/{name}.refused"
    if os.path.exists(why):
        msg = open(why).read().strip().splitlines()[-1].replace("pipetwin: error: ", "")
        print(f"{head}  refused: {msg}")
        continue
    if not os.path.exists(f"{cpu}/predicted/{name}.compare.json"):
        print(f"{head}  run failed: {cpu}/runs/{name}.log")
        continue
    trace = f"{cpu}/runs/{name}.json"
    measured = step_of(trace)
    recorded = json.load(open(trace))["otherData"]["measured"]
    mb = statistics.median(counted(recorded, recorded.get("bubble_fractions") or []))
    p = json.load(open(f"{cpu}/predicted/{name}.summary.json"))["summary"]
    ps, pb = p["step_time_s"], p["bubble_fraction"]
    err = 100 * (ps / measured - 1)
    errors.append((abs(err), name))
    bubble_errors.append(abs(100 * (pb - mb)))
    verdict = json.load(open(f"{cpu}/predicted/{name}.compare.json")).get("verdict", {}).get("step_time", "unknown")
    print(f"{head} {1e3 * measured:7.1f} ms {1e3 * ps:7.1f} ms {err:+6.1f}%  {100 * mb:5.1f}/{100 * pb:5.1f}%  {verdict}")
print()
if errors:
    worst = max(errors)
    print(f"step time error    median {statistics.median(e for e, _ in errors):.1f}%  worst {worst[0]:.1f}% ({worst[1]})"
          f"  over {len(errors)} configurations")
    print(f"bubble error       median {statistics.median(bubble_errors):.1f} points  worst {max(bubble_errors):.1f} points")
EOF
