"""The CPU ranks' heap policy: pipetwin run --malloc keep against --malloc system.

What the CPU ranks' heap policy does to a step: `pipetwin run --malloc keep`
(the default: freed memory stays in the process, as a GPU's caching allocator
keeps it) against `--malloc system` (glibc's defaults), side by side.

A GPipe step stashes every micro-batch's activations, then frees them one
backward at a time. Under glibc's defaults the freed pages go back to the
kernel and the next allocations fault them in again, zeroed: the backwards
after the first slow down, and 1F1B, which holds few micro-batches, hardly
does. Prints per policy and schedule the median step and the ranks' page
faults per step after the warm-up (the run's noise record), the first backward
and the median of the later ones in the traced step, the runs interleaved
repeat by repeat; then the ratios.

    python -m bench malloc [--repeats 3] [--steps 8] [--model examples/resnet-small.yaml]
                           [-k 1] [-m 8] [--batch 16] [--quick]
"""
import json
import os
import subprocess
import tempfile

from bench.common import BenchError, ensure_build
from stats import median


def one_run(args, schedule, policy, trace):
    cmd = [args.pipetwin, "run", "--model", args.model, "-s", schedule,
           "-k", str(args.k), "-m", str(args.m), "--batch", str(args.batch), "--steps", str(args.steps),
           "--threads", "1", "--malloc", policy, "--trace", trace]
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    with open(trace) as f:
        t = json.load(f)
    measured = t["otherData"]["measured"]
    got = {r["malloc"] for r in measured["ranks"]}
    if got != {policy}:
        raise BenchError(f"asked for --malloc {policy}, the ranks report {sorted(got)}")
    backwards = {}  # rank -> durations of its backwards in the median step, in order
    for e in t["traceEvents"]:
        if e.get("ph") == "X" and e.get("args", {}).get("op") == "B":
            backwards.setdefault(e["pid"], []).append((e["ts"], e["dur"] / 1e3))
    first = [sorted(b)[0][1] for b in backwards.values()]
    later = [d for b in backwards.values() for _, d in sorted(b)[1:]]
    return {"step": measured["noise"]["step_median_s"] * 1e3, "first": median(first),
            "later": median(later) if later else float("nan"),
            "faults": sum(h["faults_per_step"] for h in measured["noise"]["hosts"])}


def add_arguments(p):
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--model", default="examples/resnet-small.yaml")
    p.add_argument("-k", type=int, default=1)
    p.add_argument("-m", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)


def run(args) -> dict:
    if args.quick:  # one repeat of three steps (the first is the warm-up)
        args.repeats, args.steps, args.m, args.batch = 1, 3, 2, 4
    args.pipetwin = ensure_build()
    cases = [(s, pol) for s in ("gpipe", "1f1b") for pol in ("keep", "system")]
    runs = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for s, pol in cases:
                runs[(s, pol)].append(one_run(args, s, pol, os.path.join(tmp, f"{s}_{pol}_{rep}.json")))
    print(f"{args.model} K={args.k} M={args.m} batch {args.batch}, {args.repeats} interleaved repeats of "
          f"{args.steps} steps (medians over repeats)")
    print(f"{'schedule':<8} {'--malloc':<8} {'step ms':>8} {'first B ms':>10} {'later B ms':>10} {'faults/step':>12}")
    med = {}
    for c in cases:
        med[c] = {k: median(r[k] for r in runs[c]) for k in runs[c][0]}
        m = med[c]
        print(f"{c[0]:<8} {c[1]:<8} {m['step']:8.1f} {m['first']:10.1f} {m['later']:10.1f} {m['faults']:12.0f}")
    for s in ("gpipe", "1f1b"):
        print(f"{s}: step system / keep {med[(s, 'system')]['step'] / med[(s, 'keep')]['step']:.3f}, "
              f"later backwards system / keep {med[(s, 'system')]['later'] / med[(s, 'keep')]['later']:.3f}")
    return {f"{s}_{pol}": m for (s, pol), m in med.items()}
