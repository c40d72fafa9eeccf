"""Start-up and sweep speed of the CLI, a git revision (BEFORE) against this working tree (AFTER).

The two are measured side by side in one run, interleaved (before, after,
then after, before, ...), medians and ratios:
  1. wall time of `pipetwin schedule -s 1f1b -k 4 -m 8` (mostly start-up),
     --repeats-schedule runs each (default 15), median ms;
  2. wall time of the bad-input catalogue (each build's own
     tests/cli/test_bad_inputs, which runs that build's pipetwin), median s,
     and how many of its cases passed;
  3. a 1,000-configuration sweep with --engine simgrid (the k1000 grid of
     `python -m bench sweep`), median configurations per second;
2 and 3 run --repeats times each (default 3).

BEFORE is built once into a git worktree outside the source tree,
${BENCH_BEFORE_DIR:-~/.cache/pipetwin/bench-before}/<short sha>, and reused
after that (the first build takes 15+ minutes on 2 cores); or give an
existing build folder (holding cli/pipetwin and tests/cli/test_bad_inputs)
with --before-build (or BENCH_BEFORE_BUILD). AFTER is
${PIPETWIN_BUILD_DIR:-build}, built first with scripts/build.sh unless
PIPETWIN_SKIP_BUILD=1. --quick without a revision compares the build with
itself, one round of each and a 200-configuration sweep.

    python -m bench core HEAD~1                  (about a minute once both are built)
    python -m bench core --before-build /path/to/build
    python -m bench core main --repeats 1 --repeats-schedule 5
"""
import os
import re
import subprocess
import tempfile
import time

from bench.common import ROOT, BenchError, build_dir, ensure_build, loadavg, log
from bench.sweep import k1000
from stats import median

CATALOGUE = "tests/cli/test_bad_inputs"


def add_arguments(p):
    p.add_argument("revision", nargs="?", help="the git revision BEFORE is built from")
    p.add_argument("--before-build", default=os.environ.get("BENCH_BEFORE_BUILD"),
                   help="an existing build folder to use as BEFORE")
    p.add_argument("--repeats", type=int, default=int(os.environ.get("BENCH_REPEATS", "3")))
    p.add_argument("--repeats-schedule", type=int, default=int(os.environ.get("BENCH_REPEATS_SCHEDULE", "15")))


def git(*args) -> str:
    return subprocess.run(["git"] + list(args), cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def build_before(revision: str, tmp: str) -> str:
    """The build folder of REVISION, built in a worktree of its own if needed."""
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except subprocess.CalledProcessError:
        raise BenchError(f"not a revision: {revision}") from None
    short = git("rev-parse", "--short", sha)
    base = os.environ.get("BENCH_BEFORE_DIR", os.path.expanduser("~/.cache/pipetwin/bench-before"))
    folder = os.path.join(base, short)
    if not os.path.exists(os.path.join(folder, ".git")):
        os.makedirs(base, exist_ok=True)
        git("worktree", "add", "--detach", folder, sha)
    if git("-C", folder, "rev-parse", "HEAD") != sha:
        raise BenchError(f"{folder} is not at {sha}; remove it (git worktree remove {folder})")
    steps = []
    if not os.path.exists(os.path.join(folder, "build", "build.ninja")):
        steps.append(["cmake", "-S", ".", "-B", "build", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
    steps.append(["cmake", "--build", "build", "-j", os.environ.get("PIPETWIN_JOBS", str(os.cpu_count())),
                  "--target", "pipetwin", "test_bad_inputs"])
    for cmd in steps:
        log("core", f"{' '.join(cmd[:3])} ... in {folder} (reused when already built)")
        done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchError(f"building {short} failed:\n" + "\n".join((done.stdout + done.stderr).splitlines()[-40:]))
    return os.path.join(folder, "build")


def check_build(folder: str) -> None:
    for f in ("cli/pipetwin", CATALOGUE):
        if not os.access(os.path.join(folder, f), os.X_OK):
            raise BenchError(f"missing {os.path.join(folder, f)}")


def wall(cmd: list, cwd: str, out=subprocess.DEVNULL) -> tuple:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.PIPE if out is subprocess.DEVNULL else out,
                          text=True)
    return time.perf_counter() - t0, done


class Side:
    """One build's measurements."""

    def __init__(self, folder: str):
        self.folder, self.schedule, self.catalogue, self.passed, self.sweep, self.rows = folder, [], [], set(), [], set()

    def schedule_once(self) -> None:
        t, done = wall([os.path.join(self.folder, "cli/pipetwin"), "schedule", "-s", "1f1b", "-k", "4", "-m", "8"], ROOT)
        if done.returncode == 0:
            self.schedule.append(1000 * t)
        else:
            log("core", f"{self.folder}: schedule failed: {done.stderr.strip()}")

    def catalogue_once(self, tmp: str) -> None:
        path = os.path.join(tmp, "catalogue.out")
        with open(path, "w", encoding="utf-8") as out:
            t, done = wall([os.path.join(self.folder, CATALOGUE), "--gtest_brief=1"], tmp, out)
        self.catalogue.append(t)
        text = open(path, encoding="utf-8").read()
        total = re.findall(r"^\[==========\] (\d+) tests? from .* ran\.", text, re.M)
        passed = re.findall(r"^\[  PASSED  \] (\d+) tests?\.", text, re.M)
        self.passed.add(f"{passed[-1] if passed else 0}/{total[-1] if total else '?'}")
        if done.returncode != 0:
            failed = [ln[:160] for ln in text.splitlines() if re.match(r"^\[  FAILED  \] [^0-9]", ln)][:5]
            log("core", f"{self.folder}: catalogue exited {done.returncode}; failed: {failed}")

    def sweep_once(self, tmp: str, grid: list) -> None:
        csv = os.path.join(tmp, "sweep.csv")
        if os.path.exists(csv):
            os.remove(csv)
        t, done = wall([os.path.join(self.folder, "cli/pipetwin"), "sweep"] + grid + ["--engine", "simgrid", "--out", csv],
                       ROOT)
        if done.returncode != 0:
            log("core", f"{self.folder}: sweep failed: {done.stderr.strip()[-300:]}")
            return
        rows = sum(1 for _ in open(csv, encoding="utf-8")) - 1
        self.rows.add(rows)
        self.sweep.append(rows / t)


def interleave(rounds: int, before: Side, after: Side, what) -> None:
    """Odd rounds before first, even rounds after first, so neither side always goes first."""
    for i in range(1, rounds + 1):
        for side in (before, after) if i % 2 else (after, before):
            what(side)


def ratio(b, a, kind: str) -> str:
    if b is None or a is None or b <= 0 or a <= 0:
        return "n/a"
    r = b / a if kind == "time" else a / b
    if 0.995 <= r < 1.005:
        return "1.00x (the same)"
    return f"{r:.2f}x faster" if r >= 1 else f"{1 / r:.2f}x slower"


def run(a) -> dict:
    if a.quick:
        a.repeats, a.repeats_schedule = 1, 3
    with tempfile.TemporaryDirectory() as tmp:
        ensure_build()
        after_dir = os.path.abspath(build_dir())
        if a.before_build:
            before_dir = before_name = os.path.abspath(a.before_build)
        elif a.revision:
            before_dir = build_before(a.revision, tmp)
            before_name = f"{a.revision} ({git('rev-parse', '--short', a.revision + '^{commit}')})"
        elif a.quick:
            before_dir = before_name = after_dir
        else:
            raise BenchError("give a REVISION (or --before-build /path/to/build)")
        check_build(before_dir)
        check_build(after_dir)
        before, after = Side(before_dir), Side(after_dir)
        grid = k1000() if not a.quick else k1000(5, "1,2,4,8,16")
        print(f"bench core: before = {before_name}\n            after  = {after_dir}")
        print(f"load average at start: {loadavg()} ({os.cpu_count()} cores; the machine is shared and noisy:\n"
              "  the runs are interleaved so that both sides see the same noise; trust the ratios more than the numbers)")
        interleave(a.repeats_schedule, before, after, lambda s: s.schedule_once())
        interleave(a.repeats, before, after, lambda s: s.catalogue_once(tmp))
        interleave(a.repeats, before, after, lambda s: s.sweep_once(tmp, grid))
        print(f"load average at end:   {loadavg()}")
    med = lambda v: median(v) if v else None  # noqa: E731
    table = [(f"schedule -s 1f1b -k 4 -m 8 (ms, x{a.repeats_schedule})", "schedule", "time", "{:.1f}"),
             (f"bad-input catalogue (s, x{a.repeats})", "catalogue", "time", "{:.2f}"),
             (f"sweep {'1000' if not a.quick else '200'} x simgrid (configs/s, x{a.repeats})", "sweep",
              "rate", "{:.1f}")]
    print(f"\n{'median of interleaved runs':<38} {'before':>10} {'after':>10}   ratio")
    figures = {"before": before_name, "after": after_dir}
    for label, key, kind, fmt in table:
        b, f = med(getattr(before, key)), med(getattr(after, key))
        show = lambda v: "n/a" if v is None else fmt.format(v)  # noqa: E731
        print(f"{label:<38} {show(b):>10} {show(f):>10}   {ratio(b, f, kind)}")
        figures[key] = {"before": b, "after": f}
    print(f"\ncatalogue cases passed (per distinct result): before {' '.join(sorted(before.passed))}, "
          f"after {' '.join(sorted(after.passed))}")
    print(f"sweep rows written: before {' '.join(map(str, sorted(before.rows)))}, "
          f"after {' '.join(map(str, sorted(after.rows)))}")
    return figures
