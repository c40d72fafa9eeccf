"""Every schedule generator, simulated on 8 x H100 and run on this CPU against the calibrated simulator.

The generators are those of `pipetwin schedule --list --json`; the ones with
several stages per rank run with V = 2 (--virtual 2 where V is free, the
V-shaped ones' own 2). Each at (K=4, M=8) and (K=8, M=32); a shape a
generator refuses (dualpipe-v needs M >= 2K) is a row saying so.

Part h100 (simulation only, 3 s): examples/transformer-24.yaml on the h100
preset (all-to-all NVSwitch): one `pipetwin sweep` per shape (micro-batch
size --mbs, default 4), then `pipetwin simulate --json --trace` of each
configuration for every stage's peak memory and the stage -> rank placement.
Prints per configuration the step time, bubble, peak memory per stage, the
worst rank's sum of its stages' peaks and the sweep's verdict.

Part cpu: examples/transformer-24-narrow.yaml run for real here, one process
per rank and one thread each. Calibrates (`pipetwin calibrate --hardware
cpu`) on gpipe and 1f1b at the --calibrate K:M pairs, batch 4; then for every
generator x shape: `pipetwin run`, `pipetwin simulate --hardware
CALIBRATED.yaml` on the partition the run used, and `pipetwin compare
--json`. Prints measured and predicted step and bubble, the error and
compare's verdict, then the median and worst |error|.

    python -m bench schedules                             (both parts)
    python -m bench schedules --part h100                 (3 s)
    python -m bench schedules --part cpu --only "gpipe zb-h1" --shapes 4:8
    python -m bench schedules --quick                     (h100 at 4:8; cpu: gpipe, 1f1b at 2:2)

Options (each also read from its environment variable as before): --out
(SCHEDULES_OUT, default out/schedules; the CPU part's runs already there are
reused), --part (SCHEDULES_PART: h100, cpu or both), --only (SCHEDULES_ONLY),
--shapes (SCHEDULES_SHAPES, K:M pairs, default "4:8 8:32"; K:M:BATCH sets the
CPU runs' batch, by default 16 where M divides 16, else M), --mbs
(SCHEDULES_MBS), --steps (SCHEDULES_STEPS, default 6), --calibrate
(SCHEDULES_CALIBRATE, default "1:1 1:4 2:1 2:4 4:1 4:4"), --no-priority
(SCHEDULES_PRIORITY=0).
"""
import json
import os
import shutil
import subprocess

from bench import schedules_report
from bench.common import ROOT, BenchError, ensure_build, loadavg, traced_run
from bench.runs import to_file, write_partition

H100_MODEL = "examples/transformer-24.yaml"
CPU_MODEL = "examples/transformer-24-narrow.yaml"
CAL_BATCH = 4


def env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def add_arguments(p):
    p.add_argument("--out", default=env("SCHEDULES_OUT", "out/schedules"))
    p.add_argument("--part", choices=("h100", "cpu", "both"), default=env("SCHEDULES_PART", "both"))
    p.add_argument("--only", default=env("SCHEDULES_ONLY", ""), help="a space-separated subset of the generators")
    p.add_argument("--shapes", default=env("SCHEDULES_SHAPES", "4:8 8:32"))
    p.add_argument("--mbs", type=int, default=int(env("SCHEDULES_MBS", "4")))
    p.add_argument("--steps", type=int, default=int(env("SCHEDULES_STEPS", "6")))
    p.add_argument("--calibrate", default=env("SCHEDULES_CALIBRATE", "1:1 1:4 2:1 2:4 4:1 4:4"))
    p.add_argument("--no-priority", action="store_true", default=env("SCHEDULES_PRIORITY", "1") == "0")


def generators(pipetwin: str, only: str) -> list:
    """(name, V) per generator, V the stages per rank it runs with here, in --list's order."""
    listing = json.loads(subprocess.run([pipetwin, "schedule", "--list", "--json"], check=True, capture_output=True,
                                        text=True).stdout)
    names = [g["name"] for g in listing]
    unknown = [n for n in only.split() if n not in names]
    if unknown:
        raise BenchError(f"--only: unknown generator(s) {unknown} (valid: {names})")
    gens = [(g["name"], 2 if g["virtual_stages"] else (g["fixed_stages_per_rank"] or 1))
            for g in listing if not only.split() or g["name"] in only.split()]
    if not gens:
        raise BenchError("no generator to run")
    return gens


def vopt(v: int) -> list:
    return ["--virtual", str(v)] if v > 1 else []


def shapes(text: str) -> list:
    """(K, M, batch) per K:M[:BATCH]; the batch by default 16 where M divides 16, else M."""
    out = []
    for shape in text.split():
        parts = shape.split(":")
        k, m = int(parts[0]), int(parts[1])
        out.append((k, m, int(parts[2]) if len(parts) > 2 else (16 if 16 % m == 0 else m)))
    return out


def refused(pipetwin: str, s: str, v: int, k: int, m: int, path: str) -> bool:
    """Whether the generator refuses the shape: its message then in PATH."""
    done = subprocess.run([pipetwin, "schedule", "-s", s, "-k", str(k), "-m", str(m)] + vopt(v) + ["--format", "json"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode == 0:
        if os.path.exists(path):
            os.remove(path)
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(done.stderr)
    return True


def part_h100(pipetwin: str, a, gens: list) -> list:
    sim = os.path.join(a.out, "h100", "sim")
    shutil.rmtree(os.path.join(a.out, "h100"), ignore_errors=True)  # always from scratch: a model change shows
    os.makedirs(sim)
    rows = []
    for k, m, _ in shapes(a.shapes):
        csv = os.path.join(a.out, "h100", f"sweep_k{k}_m{m}.csv")
        names = ",".join(g for g, _ in gens)
        print(f"h100: sweep K={k} M={m}, micro-batch size {a.mbs}, {names} -> {csv}", flush=True)
        subprocess.run([pipetwin, "sweep", "--model", H100_MODEL, "--hardware", "h100", "-k", str(k), "-m", str(m),
                        "-s", names, "--virtual", "2", "--microbatch-size", str(a.mbs), "--out", csv],
                       check=True, env=dict(os.environ, CI="1"))
        for s, v in gens:
            name = f"{s}_k{k}_m{m}_mbs{a.mbs}"
            rows.append((s, v, k, m, name, csv))
            if refused(pipetwin, s, v, k, m, f"{sim}/{name}.refused"):
                continue
            try:  # e.g. no split fits: the sweep's row says so
                to_file([pipetwin, "simulate", "--model", H100_MODEL, "--hardware", "h100", "-s", s, "-k", str(k),
                         "-m", str(m)] + vopt(v) + ["--batch", str(m * a.mbs), "--trace", f"{sim}/{name}.json", "--json"],
                        f"{sim}/{name}.summary.json", f"{sim}/{name}.err")
            except BenchError:
                os.remove(f"{sim}/{name}.summary.json")
    print(f"\n8 x H100 (h100 preset, all-to-all), {H100_MODEL}, micro-batch size {a.mbs} (batch = {a.mbs} M), "
          "recompute none, adam")
    return schedules_report.h100(sim, rows)


def cpu_run(pipetwin: str, a, s: str, v: int, k: int, m: int, b: int, trace: str, label: str) -> bool:
    try:
        traced_run(pipetwin, trace, label, ["--model", CPU_MODEL, "-s", s, "-k", str(k), "-m", str(m)] + vopt(v) +
                   ["--batch", str(b), "--steps", str(a.steps), "--threads", "1"], not a.no_priority)
        return True
    except BenchError as e:
        print(str(e).splitlines()[-1])
        if os.path.exists(trace):
            os.remove(trace)
        return False


def part_cpu(pipetwin: str, a, gens: list) -> dict:
    folder = os.path.join(a.out, "cpu")
    for sub in ("calibration", "runs", "predicted"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    print(f"load before: {loadavg()} on {os.cpu_count()} cores")
    calibration, cal = [], [(k, m) for k, m, _ in shapes(a.calibrate)]
    for i, (k, m) in enumerate((km for km in cal for _ in (0, 1)), 1):
        s = ("gpipe", "1f1b")[(i - 1) % 2]
        trace = f"{folder}/calibration/{s}_k{k}_m{m}_b{CAL_BATCH}.json"
        if not cpu_run(pipetwin, a, s, 1, k, m, CAL_BATCH, trace,
                       f"[{i}/{2 * len(cal)}] calibration run {s} K={k} M={m} batch {CAL_BATCH}"):
            raise BenchError(f"calibration run failed: {trace[:-5]}.log")
        calibration.append(trace)
    print(f"calibrate on {len(calibration)} runs (gpipe, 1f1b; K:M in {a.calibrate}; batch {CAL_BATCH}) -> "
          f"{folder}/calibrated.yaml")
    to_file([pipetwin, "calibrate"] + calibration + ["--hardware", "cpu", "--out", f"{folder}/calibrated.yaml"],
            f"{folder}/calibrate.txt")
    rows, n, total = [], 0, len(gens) * len(shapes(a.shapes))
    for k, m, b in shapes(a.shapes):
        for s, v in gens:
            n += 1
            name = f"{s}_k{k}_m{m}_b{b}"
            rows.append((s, v, k, m, b, name))
            if refused(pipetwin, s, v, k, m, f"{folder}/runs/{name}.refused") or not cpu_run(
                    pipetwin, a, s, v, k, m, b, f"{folder}/runs/{name}.json", f"[{n}/{total}] run {s} K={k} M={m} V={v} batch {b}"):
                continue
            pred = f"{folder}/predicted/{name}"
            part = write_partition(f"{folder}/runs/{name}.json", pred + ".partition")
            to_file([pipetwin, "simulate", "--model", CPU_MODEL, "--hardware", f"{folder}/calibrated.yaml", "-s", s,
                     "-k", str(k), "-m", str(m)] + vopt(v) + ["--batch", str(b), "--partition", part, "--trace",
                                                             pred + ".json", "--json"], pred + ".summary.json")
            to_file([pipetwin, "compare", "--json", pred + ".json", f"{folder}/runs/{name}.json"], pred + ".compare.json")
    print(f"load after: {loadavg()}\n")
    print(f"this machine's CPU ({os.cpu_count()} cores), {CPU_MODEL}, one process per rank, one thread each, "
          f"{a.steps} steps;\npredicted by simulate --hardware {folder}/calibrated.yaml on each run's partition")
    return schedules_report.cpu(folder, rows)


def run(a) -> dict:
    if a.quick:
        a.shapes, a.calibrate, a.steps = "4:8", "1:1 2:2", 3
        cpu_shapes, cpu_only = "2:2:2", "gpipe 1f1b"
        if a.out == "out/schedules":
            a.out = "out/schedules-quick"
    pipetwin = ensure_build()
    a.out = os.path.join(ROOT, a.out)
    figures = {}
    if a.part != "cpu":
        figures["h100"] = part_h100(pipetwin, a, generators(pipetwin, a.only))
        print()
    if a.part != "h100":
        if a.quick:
            a.shapes, a.only = cpu_shapes, cpu_only
        figures["cpu"] = part_cpu(pipetwin, a, generators(pipetwin, a.only))
    return figures
