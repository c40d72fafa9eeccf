"""Two pipetwin binaries side by side: the same answers (sweep and plan CSVs byte for byte), and their speed.

For a change that must not move any figure (a refactoring): the docs'
sweeps and plans run with both binaries, every CSV compared byte for byte
and each simulate JSON compared with its wall time left out; then the same
commands' wall times, the binaries interleaved round after round, medians
and new/old ratios.

    python -m bench binaries OLD_PIPETWIN [NEW_PIPETWIN] [--rounds N] [--quick]

NEW defaults to this tree's build. An old binary: build a revision's
`pipetwin` target in a worktree (`git worktree add /tmp/old REV`, then
`bash scripts/build.sh` there) and give its build/cli/pipetwin.
"""
import filecmp
import json
import os
import subprocess
import tempfile
import time

from bench.common import BenchError, ROOT, ensure_build
from stats import median

SMALL = "examples/transformer-small.yaml"
# A deep, narrow decoder for pipelines of hundreds of stages (written into the run's folder).
DEEP_SPEC = ("family: llm\nname: deep\nlayers: 4094\nhidden: 256\nffn_hidden: 1024\nheads: 4\nseq_len: 128\n"
             "vocab: 1000\nprecision: bf16\n")


def deep(K: int, M: int, folder: str) -> list:
    path = os.path.join(folder, "deep.yaml")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(DEEP_SPEC)
    return ["simulate", "--model", path, "--hardware", "dgx-h100", "-s", "1f1b", "-k", str(K), "-m", str(M),
            "--engine", "fast", "--partition", "uniform"]


def seq(n: int) -> str:
    return ",".join(str(i) for i in range(1, n + 1))


def answers(quick: bool, folder: str) -> dict:
    """Name -> (arguments, output file or None for stdout JSON): the docs' kinds of sweep, plan and simulate."""
    m = "1,4" if quick else "1,4,8"
    out = {
        "sweep_fast.csv": ["sweep", "--model", SMALL, "--hardware", "a100", "-k", "1,2,4", "-m", m,
                           "-s", "gpipe,1f1b,interleaved-1f1b,zb-h1", "--recompute", "none,full"],
        "sweep_dp.csv": ["sweep", "--model", SMALL, "--hardware", "a100", "-k", "2,4", "-m", "4,8",
                         "-s", "gpipe,1f1b", "-d", "1,2"],
        "sweep_simgrid.csv": ["sweep", "--model", SMALL, "--hardware", "cpu", "-k", "2,4", "-m", "2,8",
                              "-s", "1f1b,zb-h1", "--engine", "simgrid"],
        "plan_gpt.csv": ["plan", "--model", "examples/gpt-1.7b.yaml", "--hardware", "dgx-a100-80gb",
                         "--gpus", "16", "--global-batch", "64"],
    }
    if not quick:
        out["sweep_gpt.csv"] = ["sweep", "--model", "examples/gpt-1.7b.yaml", "--hardware", "dgx-a100-80gb",
                                "-k", "2,4,8", "-m", "8,16", "-s", "1f1b,interleaved-1f1b", "-t", "1,2", "-d", "1,2",
                                "--recompute", "none,full"]
        out["plan_llama.csv"] = ["plan", "--model", "examples/llama-3-8b.json", "--hardware", "dgx-h100",
                                 "--gpus", "64", "--global-batch", "256"]
    for s, shape in (("gpipe", ["-k", "4"]), ("1f1b", ["-k", "4"]), ("zb-h1", ["-k", "4"]),
                     ("interleaved-1f1b", ["-k", "2", "-v", "2"])):
        out[f"simulate_{s}.json"] = ["simulate", "--model", SMALL, "--hardware", "a100", "-s", s, "-m", "8",
                                     "--json"] + shape
    out["simulate_deep.json"] = deep(128, 256, folder) + ["--json"]
    out["simulate_dp.json"] = ["simulate", "--model", SMALL, "--hardware", "a100", "-s", "1f1b", "-k", "4", "-m", "8",
                               "-d", "2", "--json"]
    return out


def produce(pipetwin: str, name: str, args: list, folder: str) -> str:
    path = os.path.join(folder, name)
    cmd = [pipetwin] + args
    if name.endswith(".csv"):
        cmd += ["--out" if args[0] == "sweep" else "-o", path, "-j", "2"]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    else:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if r.returncode == 0:
            j = json.loads(r.stdout)
            j.pop("wall_s", None)  # the one field that is a measurement, not an answer
            with open(path, "w", encoding="utf-8") as f:
                json.dump(j, f, indent=1, sort_keys=True)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed: {r.stderr.strip()[:300]}")
    return path


def timings(quick: bool, folder: str) -> dict:
    grid = ["--model", SMALL, "--hardware", "a100", "--ranks", "1,2,3,4", "--microbatches", seq(5 if quick else 25),
            "--schedules", "gpipe,1f1b", "--microbatch-size", "1,2,4,8,16"]
    return {
        "sweep, --engine fast": ["sweep"] + grid + ["--engine", "fast"],
        "sweep, --engine simgrid": ["sweep"] + grid + ["--engine", "simgrid"],
        "sweep with D = 2 (auto)": ["sweep", "--model", SMALL, "--hardware", "a100", "--ranks", "1,2,4,8",
                                    "--microbatches", seq(5 if quick else 25), "--schedules", "gpipe,1f1b", "-d", "2"],
        "plan gpt-1.7b, 16 GPUs": ["plan", "--model", "examples/gpt-1.7b.yaml", "--hardware", "dgx-a100-80gb",
                                   "--gpus", "16", "--global-batch", "64"],
        "simulate K=24 M=512, fast": ["simulate", "--model", "examples/transformer-24.yaml", "--hardware", "a100",
                                      "-s", "1f1b", "-k", "24", "-m", "512", "--engine", "fast"],
        f"simulate K={256 if quick else 512} deep, fast": deep(256, 512, folder) if quick else deep(512, 1024, folder),
    }


def wall(pipetwin: str, args: list, folder: str) -> float:
    extra = []
    if args[0] == "sweep":
        extra = ["--out", os.path.join(folder, "t.csv"), "-j", "2"]
        if os.path.exists(extra[1]):
            os.remove(extra[1])
            os.remove(extra[1] + ".inputs")
    elif args[0] == "plan":
        extra = ["-o", os.path.join(folder, "t.csv"), "-j", "2"]
    t0 = time.perf_counter()
    subprocess.run([pipetwin] + args + extra, cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def add_arguments(p):
    p.add_argument("old", help="the old pipetwin binary")
    p.add_argument("new", nargs="?", default=None, help="the new one (default: this tree's build)")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the timings, binaries interleaved (default 5)")


def run(a) -> dict:
    new = a.new or ensure_build()
    for b in (a.old, new):
        if not os.access(b, os.X_OK):
            raise BenchError(f"{b}: not an executable pipetwin")
    figures = {"old": os.path.abspath(a.old), "new": os.path.abspath(new), "answers": {}, "timings": {}}
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "old"))
        os.makedirs(os.path.join(tmp, "new"))
        for name, args in answers(a.quick, tmp).items():
            o = produce(a.old, name, args, os.path.join(tmp, "old"))
            n = produce(new, name, args, os.path.join(tmp, "new"))
            same = filecmp.cmp(o, n, shallow=False)
            differ += not same
            figures["answers"][name] = "identical" if same else "DIFFERENT"
            print(f"{'identical' if same else 'DIFFERENT':10s} {name}")
        rounds = 1 if a.quick else a.rounds
        cases = timings(a.quick, tmp)
        walls = {k: {"old": [], "new": []} for k in cases}
        for _ in range(rounds):
            for which, binary in (("old", a.old), ("new", new)):
                for k, args in cases.items():
                    walls[k][which].append(wall(binary, args, tmp))
    print(f"\nwall seconds, medians of {rounds} interleaved round(s):")
    print(f"{'command':28s} {'old':>8s} {'new':>8s} {'new/old':>8s}")
    for k, w in walls.items():
        o, n = median(w["old"]), median(w["new"])
        figures["timings"][k] = {"old_s": w["old"], "new_s": w["new"], "ratio": n / o if o > 0 else None}
        print(f"{k:28s} {o:8.3f} {n:8.3f} {n / o:8.2f}")
    if differ:
        raise BenchError(f"{differ} output(s) differ between the binaries (listed above)")
    return figures
