"""`python -m bench torchtitan_h100 --quick`: torchtitan's published H100 runs
through `pipetwin calibrate --runs`, fitted on Table 1's two single-host rows
(BF16 and Float8) and predicting Table 3's BF16 row on 128 GPUs. The fitted
rows come back to 0.1%, the predicted one within 5% of its published tokens
per second, and every row's predicted peak memory within 5% of the published
reading."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class PublishedTest(unittest.TestCase):
    def test_torchtitan_rows_fit_and_predict(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, "-B", "-m", "bench", "torchtitan_h100", "--quick", "--out",
                                os.path.join(tmp, "out"), "--results", tmp], cwd=ROOT, capture_output=True,
                               text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            (path,) = glob.glob(os.path.join(tmp, "torchtitan_h100-*.json"))
            with open(path, encoding="utf-8") as f:
                figures = json.load(f)["figures"]
        rows = {x["name"]: x for x in figures["rows"]}
        self.assertEqual(set(rows), {"8b-fsdp8-bf16", "8b-fsdp8-fp8", "8b-fsdp128-bf16"})
        for name in ("8b-fsdp8-bf16", "8b-fsdp8-fp8"):
            self.assertEqual(rows[name]["role"], "fit")
            self.assertLess(abs(rows[name]["step_error"]), 1e-3, rows[name])
        predicted = rows["8b-fsdp128-bf16"]
        self.assertEqual(predicted["role"], "predict")
        self.assertLess(abs(predicted["predicted_tps"] / predicted["published_tps"] - 1), 0.05, predicted)
        for row in rows.values():
            self.assertLess(abs(row["memory_error"]), 0.05, row)
        # Float8's speed-up on one host, as fitted: the published 8532 / 6667.
        (pair,) = figures["fp8_speedups"]
        self.assertAlmostEqual(pair["measured"], 8532 / 6667, places=6)
        self.assertAlmostEqual(pair["predicted"], pair["measured"], delta=0.01)


if __name__ == "__main__":
    unittest.main()
