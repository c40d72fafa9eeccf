"""How much longer a stage's forwards take after another action than after a
forward of the same stage, in measured traces (`pipetwin run --trace`): in
1f1b's steady state each forward follows a backward, whose gradients and
activations take part of the caches, and reads part of its weights back. The
simulator does not model it (docs/calibration.md, "A forward after a
backward"). A stage's first forward in a step (micro-batch 0's) is left out:
it reads its weights cold after the optimizer step (cold_weights_gbps).

    python3 scripts/forward_reads.py TRACE.json...

Prints, for each rank and stage of each trace that holds both kinds, the
median forward after a forward and after another action (ms) and the second
over the first; then the median of those ratios over all of them. A trace
that cannot be read ends the script with one line naming it and exit 1.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots"))
import common  # noqa: E402  (plots/: the traces' reader)
from stats import median  # noqa: E402

COMPUTE = (*common.COMPUTE_OPS, "STEP")


def forwards(path):
    """{(rank, stage): ([after a forward], [after another action])} in ms.
    Raises ValueError naming `path` when it is not such a trace."""
    try:
        trace = common.load_trace(path)
    except common.PlotError as e:
        raise ValueError(f"{path}: no forwards to read ({str(e).removeprefix(path + ': ')})") from None
    out, before = {}, {}
    for a in sorted(trace.actions, key=lambda a: (a.rank, a.start)):
        if a.op not in COMPUTE:
            continue
        if a.op == "F" and a.microbatch:  # micro-batch 0's, the step's first, left out
            warm = before.get(a.rank) == ("F", a.stage)
            out.setdefault((a.rank, a.stage), ([], []))[0 if warm else 1].append(a.duration * 1e3)
        before[a.rank] = (a.op, a.stage)
    return out


def main(paths):
    ratios = []
    read = [(path, forwards(path)) for path in paths]  # every file read before anything is printed
    for path, found in read:
        for (rank, stage), (warm, evicted) in sorted(found.items()):
            if not warm or not evicted:
                continue
            a, b = median(warm), median(evicted)
            ratios.append(b / a - 1)
            print(f"{path} rank {rank} stage {stage}: {len(warm)} after a forward {a:.3f} ms, "
                  f"{len(evicted)} after another action {b:.3f} ms ({100 * ratios[-1]:+.1f}%)")
    if ratios:
        print(f"median over {len(ratios)} rank-stages: {100 * median(ratios):+.1f}%")
    else:
        print("no rank ran both kinds of forward (gpipe has none after another action)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: forward_reads.py TRACE.json...")
    try:
        main(sys.argv[1:])
    except ValueError as err:
        sys.exit(str(err))
