"""How much longer a stage's forwards take after another action than after a
forward of the same stage, in measured traces (`pipetwin run --trace`): the
read of the stage's weights back that the simulator adds to each forward after
a backward (Device evicted_weights_bandwidth; schedule::StageCosts::read). A
stage's first forward in a step (micro-batch 0's) is left out: it reads its
weights cold at the other rate (cold_weights_bandwidth).

    python3 scripts/forward_reads.py TRACE.json...

Prints, for each rank and stage of each trace that holds both kinds, the
median forward after a forward and after another action (ms) and the second
over the first; then the median of those ratios over all of them. A trace
that cannot be read ends the script with one line naming it and exit 1.
"""
import json
import re
import statistics
import sys

NAME = re.compile(r"^(\d+)([A-Z_]+)(\d*)$")  # stage, op, micro-batch: 0F3, 1B0, 0STEP
COMPUTE = {"F", "B", "I", "W", "R", "STEP"}


def forwards(path):
    """{(rank, stage): ([after a forward], [after another action])} in ms.
    Raises ValueError naming `path` when it is not such a trace."""
    try:
        with open(path, encoding="utf-8") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        events.sort(key=lambda e: (e["pid"], e["ts"]))
        out, before = {}, {}
        for e in events:
            m = NAME.match(e["name"])
            if not m or m.group(2) not in COMPUTE:
                continue
            rank, stage, op = e["pid"], int(m.group(1)), m.group(2)
            if op == "F" and m.group(3) not in ("", "0"):
                warm = before.get(rank) == ("F", stage)
                out.setdefault((rank, stage), ([], []))[0 if warm else 1].append(e["dur"] / 1e3)
            before[rank] = (op, stage)
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: no forwards to read (complete events named like 0F1): {e!r}") from None


def main(paths):
    ratios = []
    read = [(path, forwards(path)) for path in paths]  # every file read before anything is printed
    for path, found in read:
        for (rank, stage), (warm, evicted) in sorted(found.items()):
            if not warm or not evicted:
                continue
            a, b = statistics.median(warm), statistics.median(evicted)
            ratios.append(b / a - 1)
            print(f"{path} rank {rank} stage {stage}: {len(warm)} after a forward {a:.3f} ms, "
                  f"{len(evicted)} after another action {b:.3f} ms ({100 * (b / a - 1):+.1f}%)")
    if ratios:
        print(f"median over {len(ratios)} rank-stages: {100 * statistics.median(ratios):+.1f}%")
    else:
        print("no rank ran both kinds of forward (gpipe has none after another action)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: forward_reads.py TRACE.json...")
    try:
        main(sys.argv[1:])
    except ValueError as err:
        sys.exit(str(err))
