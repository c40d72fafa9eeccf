"""Execution: pipetwin run against a plain LibTorch loop and torch.distributed.pipelining.

Measured side by side in one run on this machine (a small Transformer,
examples/transformer-small.yaml), medians over alternating repetitions:
  (a) pipetwin run -k 1 against a plain LibTorch loop on the same model
      (bench/plain_loop.cpp): the executor's overhead; the loop runs each
      micro-batch's forward then its backward, so pipetwin runs the schedule
      with that order (1f1b; at K = 1 gpipe would run every forward first and
      hold M micro-batches of activations, another computation);
  (b) pipetwin run against PyTorch's torch.distributed.pipelining
      (ScheduleGPipe / Schedule1F1B, Gloo; bench/pipelining_baseline.py)
      with the same model, partition, K, M, batch and threads: throughput ratio;
  (c) pipeline efficiency of those runs: the step the schedule allows on the
      measured per-stage times (transfers free) over the measured step.

    python -m bench exec [--reps 3] [--steps 12] [--quick]   (about 10 minutes on 2 cores)
"""
import json
import os
import subprocess

from bench.common import MODEL, MODEL_ARGS, ROOT, build_dir, ensure_build, venv_python
from stats import median


def add_arguments(p):
    p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", "3")), help="repetitions (default 3)")
    p.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "12")), help="steps per run (default 12)")


def run_summary(pipetwin: str, args: list) -> dict:
    out = subprocess.run([pipetwin, "run", "--model", MODEL] + args + ["--json"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def overhead(pipetwin: str, a, cores: int) -> list:
    print(f"(a) executor overhead: pipetwin run -k 1 vs a plain LibTorch loop ({MODEL}, {cores} threads, median step "
          f"over {a.steps} steps, {a.reps} repetitions)")
    print(f"{'config':<14} {'plain_s':>12} {'pipetwin_s':>12} {'overhead':>10}")
    rows, batch = [], 16 if not a.quick else 4
    for m in (1, 4) if not a.quick else (1,):
        plain, ours = [], []
        for _ in range(a.reps):
            plain.append(float(subprocess.run(
                [os.path.join(build_dir(), "bench", "plain_loop"), MODEL, str(m), str(batch), str(a.steps), str(cores)],
                cwd=ROOT, check=True, capture_output=True, text=True).stdout))
            ours.append(run_summary(pipetwin, ["-s", "1f1b", "-k", "1", "-m", str(m), "--batch", str(batch),
                                               "--steps", str(a.steps), "--threads", str(cores)])["summary"]["step_time_s"])
        p, o = median(plain), median(ours)
        print(f"{f'M={m} batch={batch}':<14} {p:12.4f} {o:12.4f} {100 * (o / p - 1):9.1f}%")
        rows.append({"m": m, "batch": batch, "plain_s": p, "pipetwin_s": o, "overhead": o / p - 1})
    return rows


def against_pipelining(pipetwin: str, a) -> list:
    print("\n(b) throughput against torch.distributed.pipelining, and (c) pipeline efficiency (K=2, 1 thread per rank)")
    print(f"{'config':<22} {'torch_s':>12} {'pipetwin_s':>12} {'ratio':>8} {'efficiency':>11}")
    rows, port = [], 29611
    for sched in ("gpipe", "1f1b") if not a.quick else ("1f1b",):
        for m in (4, 8) if not a.quick else (2,):
            batch = 4 * m
            common = ["-s", sched, "-k", "2", "-m", str(m), "--batch", str(batch), "--threads", "1"]
            j = run_summary(pipetwin, common + ["--steps", "2"])
            partition = ",".join(f"{x}:{y}" for x, y in j["partition"])
            torch, ours, eff = [], [], []
            for _ in range(a.reps):
                port += 1
                torch.append(float(subprocess.run(
                    [venv_python(), "bench/pipelining_baseline.py", "--schedule", sched, "--ranks", "2",
                     "--microbatches", str(m), "--batch", str(batch), "--steps", str(a.steps), "--threads", "1",
                     "--partition", partition, "--port", str(port)] + MODEL_ARGS,
                    cwd=ROOT, check=True, capture_output=True, text=True).stdout))
                j = run_summary(pipetwin, common + ["--steps", str(a.steps)])
                ours.append(j["summary"]["step_time_s"])
                eff.append(j["measured"]["pipeline_efficiency"])
            t, o, e = median(torch), median(ours), median(eff)
            print(f"{f'{sched} M={m} batch={batch}':<22} {t:12.4f} {o:12.4f} {t / o:8.3f} {e:11.3f}")
            rows.append({"schedule": sched, "m": m, "batch": batch, "torch_s": t, "pipetwin_s": o, "ratio": t / o,
                         "efficiency": e})
    return rows


def run(a) -> dict:
    if a.quick:  # one repetition of three steps, the smallest configuration of each part
        a.reps, a.steps = 1, 3
    pipetwin = ensure_build(targets=("plain_loop",))
    cores = os.cpu_count() or 1
    figures = {"overhead": overhead(pipetwin, a, cores)}
    figures["pipelining"] = against_pipelining(pipetwin, a)
    return figures
