# shellcheck shell=bash
# Sourced by the bench scripts (bench_fidelity.sh, bench_cross_model.sh,
# bench_schedules.sh).
#
# prio CMD...: runs CMD in a session of its own (autogroup) at nice -15 where
# this user may raise priorities (root): with autogroup scheduling, nice alone
# does not beat other sessions' work for the cores the timed runs need.
# BENCH_PRIORITY=0 (each script maps its own variable onto it) runs CMD as it
# comes.
prio() {
  if [ "${BENCH_PRIORITY:-1}" != 0 ] && [ "$(id -u)" = 0 ]; then
    setsid bash -c 'echo -15 > /proc/self/autogroup 2>/dev/null; exec nice -n -15 "$@"' _ "$@"
  else
    "$@"
  fi
}

# traced_run TRACE LABEL ARGS...: `pipetwin run ARGS --trace TRACE` at prio,
# its output in TRACE's .log beside it, after printing LABEL and the load;
# nothing where TRACE is already there (runs are reused). Returns run's status.
traced_run() {
  local trace=$1 label=$2
  shift 2
  [ -s "$trace" ] && return 0
  printf "%s (load %s)\n" "$label" "$(cut -d' ' -f1 /proc/loadavg)"
  prio "$PIPETWIN" run "$@" --trace "$trace" >"${trace%.json}.log" 2>&1
}
