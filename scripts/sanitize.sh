#!/usr/bin/env bash
# The sanitizer and fuzzing pass, run by scripts/test.sh after the regular
# tests (skip it there with PIPETWIN_SKIP_SANITIZE=1); also runs alone.
#
# 1. Builds pipetwin with clang, AddressSanitizer + UndefinedBehaviorSanitizer
#    (and libFuzzer's coverage hooks) into build-asan/ (PIPETWIN_ASAN_BUILD_DIR).
# 2. Runs every CTest test there except, by default, those whose program links
#    LibTorch: deps.torch, deps.c10d_gloo, deps.torch_nccl, the exec tests and
#    the cli tests (they start the `pipetwin` binary, which links exec/). Why:
#    the PyPI LibTorch is not instrumented, so they check little of ours that
#    the other tests and the fuzzers do not, at a high cost on a 2-core CI
#    machine: their LibTorch translation units took 6 min to compile with the
#    sanitizers, and every command the cli tests start loads LibTorch under
#    ASan (1.5 s a start, 5 min for the cli tests), which would more than
#    double this pass. PIPETWIN_SANITIZE_TORCH=1 runs them too (they passed
#    clean when tried); the regular build always runs them. The list is
#    derived from the link lines, not written down, and printed each run.
# 3. Runs each libFuzzer harness (fuzz/) for PIPETWIN_FUZZ_SECONDS (default 60)
#    from a seed corpus: examples/, the golden schedules, fuzz/seeds/, and the
#    schedules and traces that fuzz_make_seeds writes. A crash, a sanitizer
#    report, a leak, a hang (> 10 s on one input) or an exception other than
#    pipetwin::Error fails the run and leaves the input under
#    build-asan/fuzz-findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

BUILD="${PIPETWIN_ASAN_BUILD_DIR:-build-asan}"
FUZZ_SECONDS="${PIPETWIN_FUZZ_SECONDS:-60}"
JOBS="${PIPETWIN_JOBS:-$(nproc)}"
HARNESSES=(schedule_text schedule_csv schedule_json trace model_yaml hardware_yaml)
say() { echo "[sanitize] $*"; }
die() { echo "[sanitize] error: $*" >&2; exit 1; }
t_start=$SECONDS

mkdir -p "$BUILD"
if [ ! -f "$BUILD/build.ninja" ]; then
  # nvcc (probed by LibTorch's CMake config) keeps g++ as its host compiler.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPIPETWIN_SANITIZE=ON -DPIPETWIN_FUZZ=ON -DCMAKE_CUDA_HOST_COMPILER=g++ >"$BUILD/configure.log" 2>&1 || {
    cat "$BUILD/configure.log" >&2; die "configure failed (log above)"; }
else  # re-runs CMake only if a CMakeLists.txt changed, so that the test list below is current
  ninja -C "$BUILD" build.ninja >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log" >&2; die "configure failed (log above)"; }
fi

# Which tests run here: a test runs when its program is built in this tree and
# neither it nor anything it depends on links LibTorch. (grep, not grep -q: an
# early exit would cut the pipe, and pipefail would read that as no match.)
build_abs=$(cd "$BUILD" && pwd)
run_tests=() skipped=() targets=()
while IFS=$'\t' read -r name exe; do
  rel="${exe#"$build_abs/"}"
  if [ "$rel" = "$exe" ] || ! ninja -C "$BUILD" -t query "$rel" >/dev/null 2>&1; then
    skipped+=("$name (not a program built here)")
  elif [ "${PIPETWIN_SANITIZE_TORCH:-0}" != 1 ] && ninja -C "$BUILD" -t commands "$rel" | grep libtorch >/dev/null; then
    skipped+=("$name (LibTorch)")
  else
    run_tests+=("$name") targets+=("$rel")
  fi
done < <(find "$BUILD" -name CTestTestfile.cmake -exec cat {} + |
           sed -n 's/^add_test(\[=\[\(.*\)\]=\] "\([^"]*\)".*/\1\t\2/p')
[ "${#run_tests[@]}" -gt 0 ] || die "no test to run"
targets+=("fuzz/fuzz_make_seeds")
for name in "${HARNESSES[@]}"; do targets+=("fuzz/fuzz_$name"); done

t0=$SECONDS
ninja -C "$BUILD" -j "$JOBS" "${targets[@]}" >"$BUILD/build.log" 2>&1 || {
  cat "$BUILD/build.log" >&2; die "build failed (log above)"; }
say "built in $((SECONDS - t0)) s: $(tail -n 1 "$BUILD/build.log")"

# detect_stack_use_after_return stays off: SimGrid switches between its actors'
# stacks without telling ASan (Debian's build has no fiber annotations), and
# ASan's fake stack frames of one actor are then reused by another (false
# reports of invalid vptrs in sim/). PIPETWIN_SIM_LOG keeps the stderr of the
# forked simulation processes, so that a report from them is seen (not with
# the cli tests: ASan's one-line warning about those stacks would reach the
# output they check).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
[ "${PIPETWIN_SANITIZE_TORCH:-0}" = 1 ] || export PIPETWIN_SIM_LOG=1
say "not run under the sanitizers: ${skipped[*]:-none}"
t0=$SECONDS
regex="^($(printf '%s\n' "${run_tests[@]}" | sed 's/[.]/\\./g' | paste -sd'|'))\$"
(cd "$BUILD" && ctest --output-on-failure -j "$JOBS" -R "$regex") || die "tests failed under the sanitizers"
say "${#run_tests[@]} tests passed under ASan+UBSan in $((SECONDS - t0)) s"

# Seed corpora. libFuzzer adds what it finds to the first directory, so the
# corpora grow from one local run to the next; CI starts from the seeds.
seeds="$BUILD/fuzz-seeds"
rm -rf "$seeds"
"$BUILD/fuzz/fuzz_make_seeds" "$seeds" >/dev/null || die "fuzz_make_seeds failed"
mkdir -p "$seeds/model_yaml" "$seeds/hardware_yaml"
cp tests/schedule/golden/*.txt "$seeds/schedule_text/"
for f in examples/*.yaml; do
  if grep -q '^family:' "$f"; then cp "$f" "$seeds/model_yaml/"; else cp "$f" "$seeds/hardware_yaml/"; fi
done
for d in fuzz/seeds/*/; do cp "$d"* "$seeds/$(basename "$d")/"; done  # hand-written ones
mkdir -p "$BUILD/fuzz-findings"
fuzz() {  # fuzz <harness>: runs it, leaves its exit status in $BUILD/fuzz_<harness>.status
  local status=0
  "$BUILD/fuzz/fuzz_$1" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$BUILD/fuzz-findings/$1-" "$BUILD/corpus/$1" >"$BUILD/fuzz_$1.log" 2>&1 || status=$?
  echo "$status" >"$BUILD/fuzz_$1.status"
}
t0=$SECONDS
running=0
for name in "${HARNESSES[@]}"; do  # PIPETWIN_JOBS harnesses at a time
  mkdir -p "$BUILD/corpus/$name"
  [ -n "$(ls -A "$seeds/$name" 2>/dev/null)" ] || die "no seed for fuzz_$name in $seeds/$name"
  cp "$seeds/$name"/* "$BUILD/corpus/$name/"
  rm -f "$BUILD/fuzz_$name.status"
  fuzz "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
done
wait
failed=0
for name in "${HARNESSES[@]}"; do
  log="$BUILD/fuzz_$name.log"
  if [ "$(cat "$BUILD/fuzz_$name.status" 2>/dev/null)" != 0 ]; then
    tail -n 60 "$log" >&2
    echo "[sanitize] fuzz_$name failed; its input is under $BUILD/fuzz-findings/ (replay: $BUILD/fuzz/fuzz_$name FILE)" >&2
    failed=1
    continue
  fi
  done_line=$(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -n 1)
  [ -n "$done_line" ] || { tail -n 20 "$log" >&2; die "fuzz_$name did not report its runs"; }
  say "fuzz_$name ($(find "$seeds/$name" -mindepth 1 -maxdepth 1 | wc -l) seeds, corpus now $(find "$BUILD/corpus/$name" -mindepth 1 -maxdepth 1 | wc -l)): $done_line"
done
[ "$failed" = 0 ] || die "fuzzing found a failure (above)"
say "fuzzing took $((SECONDS - t0)) s; the whole pass $((SECONDS - t_start)) s"
