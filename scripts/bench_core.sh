#!/usr/bin/env bash
# Start-up and sweep speed of the CLI, BEFORE (a git revision) against AFTER
# (this working tree's build), side by side in one run, the two interleaved
# (before, after, then after, before, ...), medians and ratios:
#   1. wall time of `pipetwin schedule -s 1f1b -k 4 -m 8` (mostly start-up),
#      BENCH_REPEATS_SCHEDULE runs each (default 15), median ms;
#   2. wall time of the bad-input catalogue (each build's own
#      tests/cli/test_bad_inputs, which runs that build's pipetwin), median s,
#      and how many of its cases passed;
#   3. a 1,000-configuration sweep with --engine simgrid (the k1000 grid of
#      scripts/bench_sweep.sh), median configurations per second;
# 2 and 3 run BENCH_REPEATS times each (default 3).
#
# BEFORE is built once into a git worktree outside the source tree,
# ${BENCH_BEFORE_DIR:-~/.cache/pipetwin/bench-before}/<short sha>, and reused
# after that (the first build takes 15+ minutes on 2 cores); or give an existing
# build folder (holding cli/pipetwin and tests/cli/test_bad_inputs) with
# BENCH_BEFORE_BUILD. AFTER is ${PIPETWIN_BUILD_DIR:-build}, built first with
# scripts/build.sh unless PIPETWIN_SKIP_BUILD=1.
#   bash scripts/bench_core.sh HEAD~1                     (about a minute once both are built)
#   BENCH_BEFORE_BUILD=/path/to/build bash scripts/bench_core.sh
#   BENCH_REPEATS=1 BENCH_REPEATS_SCHEDULE=5 bash scripts/bench_core.sh main
set -euo pipefail
cd "$(dirname "$0")/.."

REPEATS="${BENCH_REPEATS:-3}"
REPEATS_SCHEDULE="${BENCH_REPEATS_SCHEDULE:-15}"
CATALOGUE=tests/cli/test_bad_inputs
log() { echo "[bench_core] $*" >&2; }
die() { log "$*"; exit 1; }

# ---- BEFORE: an existing build folder, or REVISION built in a worktree -------
build_before() {  # prints the build folder of revision $1, building it if needed
  local sha short dir
  sha=$(git rev-parse --verify --quiet "$1^{commit}") || die "not a revision: $1"
  short=$(git rev-parse --short "$sha")
  dir="${BENCH_BEFORE_DIR:-$HOME/.cache/pipetwin/bench-before}/$short"
  if [ ! -e "$dir/.git" ]; then
    mkdir -p "$(dirname "$dir")"
    git worktree add --detach "$dir" "$sha" >/dev/null 2>&1 || die "git worktree add $dir $sha failed"
  fi
  [ "$(git -C "$dir" rev-parse HEAD)" = "$sha" ] || die "$dir is not at $sha; remove it (git worktree remove $dir)"
  if [ ! -f "$dir/build/build.ninja" ]; then
    log "configuring $short in $dir/build"
    (cd "$dir" && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo) >"$TMP/before-configure.log" 2>&1 || {
      cat "$TMP/before-configure.log" >&2; die "configuring $short failed (log above)"; }
  fi
  log "building $short in $dir/build (reused when already built)"
  (cd "$dir" && cmake --build build -j "${PIPETWIN_JOBS:-$(nproc)}" --target pipetwin test_bad_inputs) >"$TMP/before-build.log" 2>&1 || {
    tail -n 40 "$TMP/before-build.log" >&2; die "building $short failed (log above)"; }
  echo "$dir/build"
}

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

if [ -n "${BENCH_BEFORE_BUILD:-}" ]; then
  BEFORE_DIR=$(cd "$BENCH_BEFORE_BUILD" && pwd)
  BEFORE_NAME="$BEFORE_DIR"
else
  [ $# -ge 1 ] || die "usage: bash scripts/bench_core.sh REVISION (or set BENCH_BEFORE_BUILD=/path/to/build)"
  BEFORE_DIR=$(build_before "$1")
  BEFORE_NAME="$1 ($(git rev-parse --short "$1^{commit}"))"
fi

check_build() {  # check_build DIR: both binaries are there
  local f
  for f in cli/pipetwin "$CATALOGUE"; do
    [ -x "$1/$f" ] || die "missing $1/$f"
  done
}
check_build "$BEFORE_DIR"

# ---- AFTER: this working tree -------------------------------------------------
if [ "${PIPETWIN_SKIP_BUILD:-0}" != 1 ]; then
  bash scripts/build.sh
fi
AFTER_DIR=$(cd "${PIPETWIN_BUILD_DIR:-build}" && pwd)
check_build "$AFTER_DIR"

# ---- measuring ----------------------------------------------------------------
now() { date +%s.%N; }
calc() { awk "BEGIN { print $1 }"; }
median() {  # the median of the numbers in file $1 ("n/a" when there are none)
  sort -g "$1" | awk '{ v[NR] = $1 } END {
    if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() {  # "N.Nx faster|slower" for before value $1, after value $2; $3 = "time" (lower is better) or "rate"
  awk -v b="$1" -v a="$2" -v kind="$3" 'BEGIN {
    if (b == "n/a" || a == "n/a" || b <= 0 || a <= 0) { print "n/a"; exit }
    r = (kind == "time") ? b / a : a / b
    if (r >= 0.995 && r < 1.005) print "1.00x (the same)"
    else if (r >= 1) printf "%.2fx faster\n", r; else printf "%.2fx slower\n", 1 / r }'
}
# interleave ROUNDS FUNCTION: calls FUNCTION before|after ROUND, odd rounds
# before first and even rounds after first, so neither side always goes first.
interleave() {
  local i
  for ((i = 1; i <= $1; i++)); do
    if ((i % 2)); then "$2" before "$i"; "$2" after "$i"; else "$2" after "$i"; "$2" before "$i"; fi
  done
}
dir_of() { if [ "$1" = before ]; then echo "$BEFORE_DIR"; else echo "$AFTER_DIR"; fi; }

schedule_once() {  # appends the wall ms of one `schedule` run to $TMP/schedule.$1
  local bin t0 t1
  bin="$(dir_of "$1")/cli/pipetwin"
  t0=$(now)
  "$bin" schedule -s 1f1b -k 4 -m 8 >/dev/null 2>"$TMP/schedule.$1.err" || { log "$1: schedule failed:"; cat "$TMP/schedule.$1.err" >&2; return 0; }
  t1=$(now)
  calc "($t1 - $t0) * 1000" >>"$TMP/schedule.$1"
}

catalogue_once() {  # appends the wall s of one catalogue run to $TMP/catalogue.$1; keeps its passes
  local bin t0 t1 rc=0
  bin="$(dir_of "$1")/$CATALOGUE"
  t0=$(now)
  (cd "$TMP" && "$bin" --gtest_brief=1 >"$TMP/catalogue.$1.$2.out" 2>&1) || rc=$?
  t1=$(now)
  calc "$t1 - $t0" >>"$TMP/catalogue.$1"
  local total passed
  total=$(sed -n 's/^\[==========\] \([0-9]*\) tests\? from .* ran\..*/\1/p' "$TMP/catalogue.$1.$2.out" | tail -n 1)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$TMP/catalogue.$1.$2.out" | tail -n 1)
  echo "${passed:-0}/${total:-?}" >>"$TMP/catalogue.$1.passed"
  if [ "$rc" != 0 ]; then
    log "$1: catalogue run $2 exited $rc (${passed:-0}/${total:-?} passed); failed:"
    grep '^\[  FAILED  \] [^0-9]' "$TMP/catalogue.$1.$2.out" | head -n 5 | cut -c1-160 >&2 || true
  fi
}

MODEL=examples/transformer-small.yaml
# 4 x 25 x 2 x 5 = 1,000 configurations, every one runnable (scripts/bench_sweep.sh's k1000).
# shellcheck disable=SC2054  # the commas are pipetwin's list syntax
k1000=(--model "$MODEL" --hardware a100 --ranks 1,2,3,4 --microbatches "$(seq -s, 1 25)" --schedules gpipe,1f1b
       --microbatch-size 1,2,4,8,16)
sweep_once() {  # appends the configurations per second of one sweep to $TMP/sweep.$1
  local bin t0 t1 rows
  bin="$(dir_of "$1")/cli/pipetwin"
  rm -f "$TMP/sweep.csv"
  t0=$(now)
  "$bin" sweep "${k1000[@]}" --engine simgrid --out "$TMP/sweep.csv" >/dev/null 2>"$TMP/sweep.$1.err" || {
    log "$1: sweep failed:"; tail -n 5 "$TMP/sweep.$1.err" >&2; return 0; }
  t1=$(now)
  rows=$(($(wc -l <"$TMP/sweep.csv") - 1))
  echo "$rows" >>"$TMP/sweep.$1.rows"
  calc "$rows / ($t1 - $t0)" >>"$TMP/sweep.$1"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "bench_core: before = $BEFORE_NAME"
echo "            after  = $AFTER_DIR"
echo "load average at start: $(load) ($(nproc) cores; the machine is shared and noisy:"
echo "  the runs are interleaved so that both sides see the same noise; trust the ratios more than the numbers)"
touch "$TMP"/{schedule,catalogue,sweep}.{before,after} "$TMP"/catalogue.{before,after}.passed "$TMP"/sweep.{before,after}.rows
log "schedule: $REPEATS_SCHEDULE runs each"
interleave "$REPEATS_SCHEDULE" schedule_once
log "bad-input catalogue: $REPEATS runs each"
interleave "$REPEATS" catalogue_once
log "sweep of 1,000 configurations with --engine simgrid: $REPEATS runs each"
interleave "$REPEATS" sweep_once
echo "load average at end:   $(load)"

# ---- the table ----------------------------------------------------------------
row() {  # row LABEL NAME KIND FORMAT: one line of the table from the medians of $TMP/NAME.{before,after}
  local b a
  b=$(median "$TMP/$2.before")
  a=$(median "$TMP/$2.after")
  printf "%-38s %10s %10s   %s\n" "$1" "$(fmt "$4" "$b")" "$(fmt "$4" "$a")" "$(ratio "$b" "$a" "$3")"
}
# shellcheck disable=SC2059  # the format is one of the literals given to row
fmt() { if [ "$2" = n/a ]; then echo n/a; else printf "$1" "$2"; fi; }
passes() { sort -u "$TMP/catalogue.$1.passed" | paste -sd' ' -; }
rows() { sort -u "$TMP/sweep.$1.rows" | paste -sd' ' -; }

echo
printf "%-38s %10s %10s   %s\n" "median of interleaved runs" before after ratio
row "schedule -s 1f1b -k 4 -m 8 (ms, x$REPEATS_SCHEDULE)" schedule time "%.1f"
row "bad-input catalogue (s, x$REPEATS)" catalogue time "%.2f"
row "sweep 1000 x simgrid (configs/s, x$REPEATS)" sweep rate "%.1f"
echo
echo "catalogue cases passed (per distinct result): before $(passes before), after $(passes after)"
echo "sweep rows written: before $(rows before), after $(rows after)"
