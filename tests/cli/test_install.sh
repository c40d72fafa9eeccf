#!/usr/bin/env bash
# cmake --install into a temporary prefix gives a working pipetwin: its
# executor found beside it (info, a real two-rank run), its plot scripts found
# under PREFIX/share (a Gantt chart of that run), nothing read from the build;
# and the twin library: a program of its own (examples/library) configured
# with find_package(pipetwin) against the prefix predicts the step that
# `pipetwin simulate` does, and streams a sweep's rows.
#   test_install.sh BUILD_DIR EXAMPLES_DIR
set -euo pipefail
build=$1 examples=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 || { cat "$prefix/install.log"; fail "cmake --install"; }
bin=$prefix/bin/pipetwin
[ -x "$bin" ] && [ -x "$prefix/bin/pipetwin-exec" ] || fail "no bin/pipetwin and bin/pipetwin-exec under $prefix"
[ -f "$prefix/share/pipetwin/plots/gantt.py" ] || fail "no share/pipetwin/plots/gantt.py"
# The presets beside the binary (each also embedded in it), readable as a presets folder.
presets=$prefix/share/pipetwin/presets
[ -f "$presets/a100.yaml" ] && [ -f "$presets/selene.yaml" ] || fail "no share/pipetwin/presets/*.yaml"
listed=$("$bin" --presets-dir "$presets" info --presets) || fail "info --presets with the installed presets"
grep -q "^selene .* $presets/selene.yaml\$" <<<"$listed" || fail "info --presets does not find $presets/selene.yaml: $listed"
work=$prefix/work
mkdir -p "$work"
cd "$work"  # nothing relative to the source tree or the build
info=$("$bin" info --json)
grep -q "\"executor\": \"$prefix/bin/pipetwin-exec\"" <<<"$info" || fail "info does not ask the installed executor: $info"
grep -q '"libtorch": "2\.' <<<"$info" || fail "info reports no LibTorch: $info"
grep -q "\"plots\": \"$prefix/share/pipetwin/plots\"" <<<"$info" || fail "info does not name the installed plot scripts: $info"
"$bin" run --model "$examples/mlp-small.yaml" -s 1f1b -k 2 -m 2 --steps 2 --threads 1 --trace run.json >run.log 2>&1 ||
  { cat run.log; fail "pipetwin run from the prefix"; }
grep -q '^measured ' run.log || fail "run printed no measured line: $(cat run.log)"
PIPETWIN_PLOTS_DIR= "$bin" plot gantt run.json --out gantt >plot.log 2>&1 || { cat plot.log; fail "pipetwin plot from the prefix"; }
[ -s gantt.png ] || fail "no gantt.png"
[ -f "$prefix/lib/libpipetwin.so" ] && [ -f "$prefix/include/pipetwin/twin/pipetwin.hpp" ] ||
  fail "no lib/libpipetwin.so or include/pipetwin/twin/pipetwin.hpp under $prefix"
cmake -S "$examples/library" -B example -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >example.log 2>&1 &&
  cmake --build example >>example.log 2>&1 || { cat example.log; fail "examples/library against the installed library"; }
./example/predict "$examples/transformer-small.yaml" cpu 1f1b 4 8 >library.out 2>&1 || { cat library.out; fail "the library example"; }
"$bin" simulate --model "$examples/transformer-small.yaml" --hardware cpu -s 1f1b -k 4 -m 8 --json >simulate.json ||
  fail "pipetwin simulate"
want=$(python3 -c 'import json,sys; print("%.9g" % json.load(open(sys.argv[1]))["summary"]["step_time_s"])' simulate.json)
got=$(awk '$1 == "step_time_s" {print $2}' library.out)
[ -n "$got" ] && [ "$got" = "$want" ] || fail "the library predicts a step of '$got' s, simulate $want s: $(cat library.out)"
grep -q '^rows 2$' library.out || fail "the library's sweep streamed no two rows: $(cat library.out)"
[ -s sweep.csv ] || fail "the library's sweep wrote no sweep.csv"
echo "ok: installed to a temporary prefix; info, run and plot work from it; the library predicts $got s as simulate does"
