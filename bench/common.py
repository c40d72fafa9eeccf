"""What every benchmark of `python -m bench` shares: the repository's paths
(scripts/ and plots/ put on sys.path, so `stats`, `trace_step` and
`wide_repeats` import), the build and the CLI, running a command at high
priority, a traced `pipetwin run`, the host probe and the commit beside the
figures, and the results file written under bench/results/.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _sub in ("plots", "scripts"):
    if os.path.join(ROOT, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, _sub))

RESULTS = os.path.join(ROOT, "bench", "results")
# The model the execution benchmarks run, and its shape as the PyTorch baselines take it.
MODEL = "examples/transformer-small.yaml"
MODEL_ARGS = ["--d-model", "128", "--d-ff", "512", "--heads", "4", "--seq-len", "64", "--vocab", "1000", "--layers", "4"]


class BenchError(Exception):
    """A benchmark that cannot go on: its message is printed on one line."""


def log(name: str, text: str) -> None:
    print(f"[{name}] {text}", file=sys.stderr, flush=True)


def build_dir() -> str:
    return os.environ.get("PIPETWIN_BUILD_DIR", os.path.join(ROOT, "build"))


def venv_python() -> str:
    """The project's Python (scripts/setup.sh's virtualenv), this one where there is none."""
    venv = os.environ.get("PIPETWIN_VENV", os.path.expanduser("~/.cache/pipetwin/venv"))
    path = os.path.join(venv, "bin", "python")
    return path if os.access(path, os.X_OK) else sys.executable


def ensure_build(targets: tuple = (), skip: bool | None = None) -> str:
    """Runs scripts/build.sh (unless PIPETWIN_SKIP_BUILD=1 or `skip`), then
    builds `targets`; returns the path of the pipetwin binary."""
    if skip is None:
        skip = os.environ.get("PIPETWIN_SKIP_BUILD", "") not in ("", "0")
    if not skip:
        subprocess.run(["bash", "scripts/build.sh"], cwd=ROOT, check=True, stdout=sys.stderr)
    for t in targets:
        subprocess.run(["cmake", "--build", build_dir(), "--target", t], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    binary = os.path.join(build_dir(), "cli", "pipetwin")
    if not os.access(binary, os.X_OK):
        raise BenchError(f"no pipetwin at {binary}: build first (bash scripts/build.sh) or set PIPETWIN_BUILD_DIR")
    return binary


def prio(cmd: list, enabled: bool = True) -> list:
    """CMD in a session of its own at nice -15 where this user may raise
    priorities (root): with autogroup scheduling, nice alone does not beat
    other sessions' work for the cores the timed runs need."""
    if not enabled or os.geteuid() != 0:
        return list(cmd)
    return ["setsid", "bash", "-c", 'echo -15 > /proc/self/autogroup 2>/dev/null; exec nice -n -15 "$@"', "_"] + list(cmd)


def loadavg(fields: int = 3) -> str:
    try:
        with open("/proc/loadavg", encoding="utf-8") as f:
            return " ".join(f.read().split()[:fields])
    except OSError:
        return "n/a"


def traced_run(pipetwin: str, trace: str, label: str, args: list, priority: bool = True) -> None:
    """`pipetwin run ARGS --trace TRACE` at high priority, its output in
    TRACE's .log beside it, after printing LABEL and the load; nothing where
    TRACE is already there (runs are reused). Raises BenchError with the log's
    tail when the run fails."""
    if os.path.exists(trace) and os.path.getsize(trace) > 0:
        return
    print(f"{label} (load {loadavg(1)})", flush=True)
    logfile = trace[: -len(".json")] + ".log"
    with open(logfile, "w", encoding="utf-8") as out:
        done = subprocess.run(prio([pipetwin, "run"] + list(args) + ["--trace", trace], priority),
                              stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        with open(logfile, encoding="utf-8") as f:
            tail = "".join(f.readlines()[-10:])
        raise BenchError(f"pipetwin run failed ({logfile}):\n{tail}")


def run_json(cmd: list) -> dict:
    """Runs CMD, which prints one JSON document; raises BenchError on failure."""
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(cmd[:3])} ... failed: {done.stderr.strip().splitlines()[-1:]}")
    try:
        return json.loads(done.stdout)
    except ValueError as e:
        raise BenchError(f"{' '.join(cmd[:3])} ... printed no JSON: {e}") from None


def commit() -> str:
    """`git rev-parse HEAD`, with -dirty where the tree has changes; "unknown" outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def host_probe(pipetwin: str | None = None) -> dict:
    """The host beside the figures: cores, CPU model, memory, load average,
    and `pipetwin probe`'s summary (two short rounds, under a second) where
    the binary is there."""
    host = {"hostname": platform.node(), "cores": os.cpu_count(), "cpu_model": _cpu_model(),
            "memory_bytes": _memory_bytes(), "loadavg": loadavg(3), "python": platform.python_version()}
    if pipetwin and os.access(pipetwin, os.X_OK):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "probe.json")
            done = subprocess.run([pipetwin, "probe", "--rounds", "2", "--seconds", "0.1", "--quiet", "--json", path],
                                  capture_output=True, text=True)
            if done.returncode == 0 and os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    probe = json.load(f)
                host["probe"] = {k: v for k, v in probe.items() if k != "rounds"} if isinstance(probe, dict) else probe
                host["probe_line"] = done.stdout.strip()
    return host


def results_path(name: str, out: str | None, head: str) -> str:
    """OUT when it names a .json file; else OUT (default bench/results)/NAME-<date>-<commit>.json."""
    if out and out.endswith(".json"):
        return out
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return os.path.join(out or RESULTS, f"{name}-{date}-{head[:12]}{'-dirty' if head.endswith('-dirty') else ''}.json")


def write_results(name: str, figures: dict, options: dict, out: str | None, pipetwin: str | None) -> str:
    """Writes the benchmark's figures with the commit and the host probe, to a
    temporary renamed into place; returns the path."""
    head = commit()
    doc = {"benchmark": name, "commit": head,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "options": options, "host": host_probe(pipetwin), "figures": figures}
    path = results_path(name, out, head)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".results-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)
    return path
