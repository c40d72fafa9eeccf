"""The benchmarks' one entry, run from the repository's root:

    python -m bench --list                     every benchmark, one line each
    python -m bench NAME [--quick] [--results PATH] [NAME's options]
    python -m bench NAME --help

Each benchmark prints its table and writes its figures, with the commit and a
host probe, to bench/results/NAME-<date>-<commit>.json (--results DIR or
FILE.json elsewhere). --quick is the smallest setting, for a check that the
benchmark runs (seconds to a few minutes), not for figures to quote.
"""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys

from bench import BENCHMARKS
from bench.common import ROOT, BenchError, build_dir, write_results


def summary_line(module) -> str:
    return (module.__doc__ or "").strip().splitlines()[0].rstrip(".") if module.__doc__ else "(no description)"


def parser(modules: dict) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="list the benchmarks, one line each")
    sub = p.add_subparsers(dest="name", metavar="NAME")
    for name, module in modules.items():
        s = sub.add_parser(name, help=summary_line(module), description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        s.add_argument("--quick", action="store_true", help="the smallest setting: a check that it runs")
        s.add_argument("--results", metavar="PATH", default=None,
                       help="a folder for the results file (default bench/results) or a FILE.json")
        s.add_argument("--no-results", action="store_true", help="print only; write no results file")
        module.add_arguments(s)
    return p


def main(argv: list) -> int:
    modules = {name: importlib.import_module(f"bench.{name}") for name in BENCHMARKS}
    p = parser(modules)
    args = p.parse_args(argv)
    if args.list:
        width = max(len(n) for n in modules)
        for name, module in modules.items():
            print(f"{name:<{width}}  {summary_line(module)}")
        return 0
    if not args.name:
        p.print_usage(sys.stderr)
        print("python -m bench: give a benchmark's NAME, or --list", file=sys.stderr)
        return 2
    if args.results:
        args.results = os.path.abspath(args.results)
    os.chdir(ROOT)  # the benchmarks name examples/ and scripts/ from the root
    try:
        figures = modules[args.name].run(args)
    except BenchError as e:
        print(f"python -m bench {args.name}: {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"python -m bench {args.name}: {' '.join(map(str, e.cmd[:4]))} ... exited {e.returncode}", file=sys.stderr)
        return 1
    if not args.no_results:
        options = {k: v for k, v in vars(args).items() if k not in ("list", "name", "results", "no_results")}
        path = write_results(args.name, figures, options, args.results,
                             os.path.join(build_dir(), "cli", "pipetwin"))
        print(f"results: {os.path.relpath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
