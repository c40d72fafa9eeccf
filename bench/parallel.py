"""Data and tensor parallelism: pipetwin run -d 2 / -t 2 against DDP and torch tensor parallel.

Side by side in one run on this machine, same Transformer
(examples/transformer-small.yaml), batch, micro-batches, Adam and threads (1
per process); medians over alternating repetitions; ratio = PyTorch's step /
pipetwin's (> 1: pipetwin faster):
  (a) pipetwin run -k 1 -d 2 (each replica's gradients all-reduced over Gloo
      at REDUCE_GRAD, one flat buffer after the last backward) against
      DistributedDataParallel (bench/ddp_baseline.py: buckets reduced during
      the last micro-batch's backward);
  (b) pipetwin run -k 1 -t 2 (Megatron-LM's split of every layer) against
      torch.distributed.tensor.parallel (bench/tp_baseline.py: the blocks
      split the same way, embedding and head replicated).

    python -m bench parallel [--reps 3] [--steps 12] [--quick]   (about 6 minutes on 2 cores)
"""
import json
import os
import subprocess

from bench.common import MODEL, MODEL_ARGS, ROOT, ensure_build, venv_python
from stats import median

# (part, baseline script, its world option, pipetwin's options, the table's column)
PARTS = (
    ("data", "bench/ddp_baseline.py", "--replicas", ["-d", "2"], "ddp_s"),
    # The hardware prices only the partition (K = 1 here): a preset whose topology takes tensor groups.
    ("tensor", "bench/tp_baseline.py", "--members", ["--hardware", "a100", "-t", "2"], "torch_tp_s"),
)


def add_arguments(p):
    p.add_argument("--reps", type=int, default=int(os.environ.get("REPS", "3")), help="repetitions (default 3)")
    p.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "12")), help="steps per run (default 12)")


def one_part(pipetwin: str, a, part: tuple, port: int) -> tuple:
    what, script, world, ours_opts, column = part
    title = ("(a) data parallelism, D=2 replicas of K=1" if what == "data"
             else "(b) tensor parallelism, T=2 members of K=1")
    print(f"{title} ({MODEL}, 1 thread per process, median step over {a.steps} steps, {a.reps} repetitions)")
    print(f"{'config':<18} {column:>10} {'pipetwin_s':>12} {'ratio':>8}")
    rows = []
    for m in (1, 4) if not a.quick else (1,):
        batch = 16 if not a.quick else 4
        theirs, ours = [], []
        for _ in range(a.reps):
            port += 1
            theirs.append(float(subprocess.run(
                [venv_python(), script, world, "2", "--microbatches", str(m), "--batch", str(batch), "--steps",
                 str(a.steps), "--threads", "1", "--port", str(port)] + MODEL_ARGS,
                cwd=ROOT, check=True, capture_output=True, text=True).stdout))
            out = subprocess.run([pipetwin, "run", "--model", MODEL, "-s", "1f1b", "-k", "1"] + ours_opts +
                                 ["-m", str(m), "--batch", str(batch), "--steps", str(a.steps), "--threads", "1", "--json"],
                                 cwd=ROOT, check=True, capture_output=True, text=True).stdout
            ours.append(json.loads(out)["summary"]["step_time_s"])
        t, o = median(theirs), median(ours)
        print(f"{f'M={m} batch={batch}':<18} {t:10.4f} {o:12.4f} {t / o:8.3f}")
        rows.append({"m": m, "batch": batch, "torch_s": t, "pipetwin_s": o, "ratio": t / o})
    return rows, port


def run(a) -> dict:
    if a.quick:  # one repetition of three steps at M = 1
        a.reps, a.steps = 1, 3
    pipetwin = ensure_build()
    figures, port = {}, 29711
    for i, part in enumerate(PARTS):
        if i:
            print()
        figures[part[0]], port = one_part(pipetwin, a, part, port)
    return figures
