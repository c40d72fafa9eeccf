"""Gloo's spinning loop thread: the executor's back-off against Gloo as shipped.

What Gloo's spinning loop thread costs a step, and what backing it off
gives back: `pipetwin run` with the executor's back-off (the default) against
PIPETWIN_GLOO_BACKOFF=0 (Gloo as shipped), side by side.

Gloo's TCP loop thread try-locks a pair's mutex for every ready socket and
waits again at once when the rank's main thread holds it; with more ranks than
cores the holder is often preempted, and the loop spins on a core the ranks
need (exec/gloo_backoff.hpp). Prints per configuration and setting the median
step, the CPU time the ranks used per step (the run's noise record: the ranks'
share of the host's CPU time x its CPUs x the step) and the back-offs per
step, the runs interleaved repeat by repeat; then the ratios.

    python -m bench gloo_backoff [--repeats 3] [--steps 12] [--model examples/transformer-small.yaml]
                                 [--batch 16] [--quick]
"""
import json
import os
import subprocess
import tempfile

from bench.common import BenchError, ensure_build
from stats import median

CONFIGS = [("gpipe", 4, 16), ("1f1b", 4, 8), ("1f1b", 4, 4), ("1f1b", 2, 16)]


def one_run(args, config, backoff, summary):
    s, k, m = config
    cmd = [args.pipetwin, "run", "--model", args.model, "-s", s, "-k", str(k),
           "-m", str(m), "--batch", str(args.batch), "--steps", str(args.steps), "--threads", "1",
           "--summary", summary]
    env = dict(os.environ, PIPETWIN_GLOO_BACKOFF=backoff)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    with open(summary) as f:
        measured = json.load(f)["measured"]
    noise = measured["noise"]
    step = noise["step_median_s"]
    cpu = sum(h["ranks_share"] * h["cpus"] for h in noise["hosts"]) * step
    backoffs = sum(r.get("gloo_backoffs", 0) for r in measured["ranks"])
    return {"step": step * 1e3, "cpu": cpu * 1e3, "backoffs": backoffs / args.steps}


def add_arguments(p):
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--model", default="examples/transformer-small.yaml")
    p.add_argument("--batch", type=int, default=16)


def run(args) -> dict:
    configs = CONFIGS
    if args.quick:  # one repeat of three steps of the smallest configuration
        args.repeats, args.steps, args.batch = 1, 3, 4
        configs = [("1f1b", 2, 4)]
    args.pipetwin = ensure_build()
    cases = [(c, b) for c in configs for b in ("1", "0")]
    runs = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for c, b in cases:
                runs[(c, b)].append(one_run(args, c, b, os.path.join(tmp, f"{c[0]}_{c[1]}_{c[2]}_{b}_{rep}.json")))
    print(f"{args.model} batch {args.batch}, {args.repeats} interleaved repeats of {args.steps} steps "
          f"(medians over repeats), host with {os.cpu_count()} CPUs")
    print(f"{'config':<14} {'back-off':<9} {'step ms':>8} {'CPU ms/step':>12} {'back-offs/step':>15}")
    med = {}
    for c, b in cases:
        med[(c, b)] = {k: median(r[k] for r in runs[(c, b)]) for k in runs[(c, b)][0]}
        m = med[(c, b)]
        name = f"{c[0]} K={c[1]} M={c[2]}"
        print(f"{name:<14} {'on' if b == '1' else 'off':<9} {m['step']:8.1f} {m['cpu']:12.1f} {m['backoffs']:15.0f}")
    for c in configs:
        on, off = med[(c, "1")], med[(c, "0")]
        print(f"{c[0]} K={c[1]} M={c[2]}: step on / off {on['step'] / off['step']:.3f}, "
              f"CPU per step on / off {on['cpu'] / off['cpu']:.3f}")
    return {f"{c[0]}_k{c[1]}_m{c[2]}_{'on' if b == '1' else 'off'}": m for (c, b), m in med.items()}
