"""Calibrate a demo's runs again, keeping a chosen subset of each calibration
configuration's repeats, and score its held-out configurations as the demo
does (the prediction against the median of the quiet repeats).

    python3 scripts/demo_rescore.py [--keep RULE]... [--without CONFIG]... OUT...

OUT is a demo's output folder (PIPETWIN_OUT of scripts/demo.sh): its runs/
(each configuration's *.quiet list) and compare/ (the held-out ones). For
every RULE (default: all) and every OUT, prints the held-out step and bubble
errors, then per rule the medians over the folders and how many met the
demo's aims (step median <= 5%, worst <= 10%; bubble worst <= 3 points).
--without leaves a calibration configuration out (its run name, such as
1f1b_k4_m16_none): what the calibration gives without it, on the same runs.

RULE, over a configuration's quiet repeats sorted by their traced step (as
the demo and scripts/median_repeat.py choose the median one: trace_step.step_of):
  all       every one (the demo's calibration)
  median    the median one
  middle    all but the fastest and the slowest
  fastest   the fastest one; fastest2 and fastest-half likewise

Environment: PIPETWIN_BUILD_DIR (default build). Writes under OUT/rescore/.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_partition  # noqa: E402
from trace_step import step_of  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plots"))
from stats import median  # noqa: E402

RULES = ("all", "median", "middle", "fastest", "fastest2", "fastest-half")


def keep(rule, files):
    runs = sorted(files, key=step_of)
    n = len(runs)
    return {
        "all": runs,
        "median": runs[(n - 1) // 2:(n - 1) // 2 + 1],
        "middle": runs[1:-1] if n >= 3 else runs,
        "fastest": runs[:1],
        "fastest2": runs[:2],
        "fastest-half": runs[:max(1, (n + 1) // 2)],
    }[rule]


def lines(path):
    """A .quiet or .repeats list's traces. The demo writes them as paths from
    where it ran (out/runs/NAME_r1.json); each is read from the list's own
    folder where a file of that name is there, so that a demo's output moved
    or renamed (out/ kept as out/da) scores its own runs, not those now at the
    old path."""
    with open(path, encoding="utf-8") as f:
        named = [line.strip() for line in f if line.strip()]
    here = [os.path.join(os.path.dirname(path), os.path.basename(n)) for n in named]
    return [h if os.path.exists(h) else n for h, n in zip(here, named)]


def args_of(other):
    """A run's configuration (its trace's otherData) as simulate's arguments."""
    return ["-s", other["schedule"], "-k", str(other["ranks"]), "-m", str(other["microbatches"]),
            "--batch", str(int(other["batch"])), "--recompute", other["recompute"]]


def run(cmd, out=None):
    with open(out, "w", encoding="utf-8") if out else open(os.devnull, "w", encoding="utf-8") as f:
        subprocess.run(cmd, check=True, stdout=f)


def score(pipetwin, demo, rule, without=()):
    runs = os.path.join(demo, "runs")
    work = os.path.join(demo, "rescore", rule + "".join("-without-" + w for w in sorted(without)))
    os.makedirs(work, exist_ok=True)
    held = sorted(n[:-5] for n in os.listdir(os.path.join(demo, "compare")) if n.endswith(".json"))
    calibrate = sorted(n[:-6] for n in os.listdir(runs) if n.endswith(".quiet") and n[:-6] not in held and n[:-6] not in without)
    if not calibrate:
        raise ValueError(f"no {runs}/*.quiet list of a configuration outside compare/ to calibrate on")
    if not held:
        raise ValueError(f"no {demo}/compare/*.json: no held-out configuration to score (the demo stopped early?)")
    traces = [t for c in calibrate for t in keep(rule, lines(os.path.join(runs, c + ".quiet")))]
    hardware = os.path.join(work, "hardware.yaml")
    run([pipetwin, "calibrate", *traces, "--hardware", "cpu", "--out", hardware])
    steps, bubbles = [], []
    for n in held:
        with open(os.path.join(runs, n + ".json"), encoding="utf-8") as f:
            other = json.load(f)["otherData"]
        spec = os.path.join(work, n + ".model.yaml")
        with open(spec, "w", encoding="utf-8") as f:
            f.write(other["model_spec"])
        partition, predicted = os.path.join(work, n + ".partition"), os.path.join(work, n + ".json")
        with open(partition, "w", encoding="utf-8") as f:
            f.write(trace_partition.main(os.path.join(runs, n + ".json")) + "\n")
        run([pipetwin, "simulate", "--model", spec, *args_of(other), "--hardware", hardware,
             "--partition", partition, "--trace", predicted])
        repeats = lines(os.path.join(runs, n + ".repeats"))
        compared = os.path.join(work, n + ".compare.json")
        run([pipetwin, "compare", predicted, os.path.join(runs, n + ".json"),
             *(["--repeats", *repeats] if repeats else []), "--json"], compared)
        with open(compared, encoding="utf-8") as f:
            c = json.load(f)
        steps.append(100 * c["repeats"]["relative_error"] if "repeats" in c else
                     100 * c["step_time_s"]["relative_error"])
        bubble = c["bubble_fraction"]
        bubbles.append(bubble.get("measured_over_steps", bubble)["error_points"])
    return len(traces), steps, bubbles


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="append", choices=RULES)
    parser.add_argument("--without", action="append", default=[], metavar="CONFIG")
    parser.add_argument("demos", nargs="+")
    a = parser.parse_args()
    pipetwin = os.path.join(os.environ.get("PIPETWIN_BUILD_DIR", "build"), "cli", "pipetwin")
    for rule in a.keep or ["all"]:
        medians, worsts, bubble_worsts, met, bubble_met = [], [], [], 0, 0
        for demo in a.demos:
            try:
                kept, steps, bubbles = score(pipetwin, demo, rule, a.without)
            except (OSError, ValueError, KeyError, IndexError, subprocess.CalledProcessError) as e:
                sys.exit(f"{demo}: not a demo's output to score again (runs/*.quiet, compare/*.json): {e}")
            med, worst = median(map(abs, steps)), max(map(abs, steps))
            bworst = max(map(abs, bubbles))
            medians.append(med), worsts.append(worst), bubble_worsts.append(bworst)
            met += med <= 5 and worst <= 10
            bubble_met += bworst <= 3
            print(f"{rule:12s} {demo}: {kept} runs; steps " + " ".join(f"{e:+.1f}%" for e in steps) +
                  f" (median {med:.1f}%, worst {worst:.1f}%); bubbles " +
                  " ".join(f"{b:+.1f}" for b in bubbles) + f" (worst {bworst:.1f})")
        print(f"{rule:12s} over {len(a.demos)}: step median {median(medians):.1f}% "
              f"({min(medians):.1f}-{max(medians):.1f}), worst {median(worsts):.1f}% "
              f"(at most {max(worsts):.1f}); step aims met in {met}, bubble worst "
              f"{median(bubble_worsts):.1f} points, within 3 in {bubble_met}")


if __name__ == "__main__":
    main()
