"""Prints the partition a trace recorded (otherData.partition) as the
begin:end ranges that `pipetwin simulate --partition FILE` reads, e.g.
"0:3 3:6": the prediction of a measured run is then of the same IR.

    python3 scripts/trace_partition.py TRACE.json > RUN.partition
"""
import json
import sys


def main(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            ranges = json.load(f)["otherData"]["partition"]
        return " ".join(f"{int(b)}:{int(e)}" for b, e in ranges)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"{path}: no partition to read (otherData.partition): {e}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: trace_partition.py TRACE.json")
    print(main(sys.argv[1]))
