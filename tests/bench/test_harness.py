"""`python -m bench`: --list exits 0 and names every benchmark module of
bench/ once, a missing or unknown name is refused, and a results file
carries the commit and the host beside the figures. Runs no benchmark."""
import ast
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, ROOT)
from bench import BENCHMARKS  # noqa: E402
from bench import common  # noqa: E402


def bench(*args):
    return subprocess.run([sys.executable, "-B", "-m", "bench"] + list(args), cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def modules_with_run():
    """The modules of bench/ that define run(args): the benchmarks."""
    found = set()
    for f in os.listdir(os.path.join(ROOT, "bench")):
        if f.endswith(".py") and not f.startswith("_"):
            with open(os.path.join(ROOT, "bench", f), encoding="utf-8") as src:
                tree = ast.parse(src.read())
            if any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body):
                found.add(f[:-3])
    return found


class HarnessTest(unittest.TestCase):
    def test_list_names_every_benchmark_once(self):
        r = bench("--list")
        self.assertEqual(r.returncode, 0, r.stderr)
        names = [line.split()[0] for line in r.stdout.splitlines()]
        self.assertEqual(names, list(BENCHMARKS))
        self.assertEqual(set(names), modules_with_run())
        for line in r.stdout.splitlines():
            self.assertGreater(len(line.split(None, 1)), 1, f"no description: {line!r}")

    def test_each_benchmark_has_help_and_quick(self):
        for name in BENCHMARKS:
            r = bench(name, "--help")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("--quick", r.stdout)

    def test_missing_or_unknown_name_is_refused(self):
        r = bench()
        self.assertEqual(r.returncode, 2)
        self.assertIn("--list", r.stderr)
        r = bench("no-such-benchmark")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no-such-benchmark", r.stderr)

    def test_results_carry_the_commit_and_the_host(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = common.write_results("sweep", {"fast_s": 1.5}, {"quick": True}, tmp, None)
            self.assertTrue(os.path.basename(path).startswith("sweep-"))
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            self.assertEqual(os.listdir(tmp), [os.path.basename(path)])  # no temporary left beside it
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        if head:
            self.assertTrue(doc["commit"].startswith(head), doc["commit"])
            self.assertIn(doc["commit"][len(head):], ("", "-dirty"))
        self.assertEqual(doc["figures"], {"fast_s": 1.5})
        self.assertEqual(doc["host"]["cores"], os.cpu_count())
        self.assertIn("loadavg", doc["host"])
        self.assertEqual(common.results_path("x", os.path.join("a", "b.json"), "abc"), os.path.join("a", "b.json"))


if __name__ == "__main__":
    unittest.main()
