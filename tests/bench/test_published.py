"""Published GPU runs through `pipetwin calibrate --runs`, each benchmark's
quick form: its two fitted single-host rows (BF16 and FP8) and one predicted.
`python -m bench torchtitan_h100 --quick`: torchtitan's Table 1 fitted, Table 3's
BF16 row on 128 GPUs predicted; the fitted rows come back to 0.1%, the predicted
one within 5% of its published tokens per second, and every row's peak memory
within 5% of the published reading. `python -m bench dgxc_h100 --quick`: NVIDIA's
Llama 3.1 8B recipe (context parallelism 2) fitted on 8 GPUs, its BF16 run on 16
predicted within 5%. `python -m bench mbridge_h100 --quick`: Megatron-Bridge's Llama 3 8B
FP8 row fitted on 8 GPUs, its Qwen3-30B-A3B mixture of experts on 16 GPUs (E = 16 over
two nodes) predicted within 5%."""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def quick_figures(name, *extra):
    """`python -m bench NAME --quick [EXTRA...]`'s figures, from its results file."""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-B", "-m", "bench", name, "--quick", "--out", os.path.join(tmp, "out"),
                            "--results", tmp] + list(extra), cwd=ROOT, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError(r.stdout + r.stderr)
        (path,) = glob.glob(os.path.join(tmp, name + "-*.json"))
        with open(path, encoding="utf-8") as f:
            return json.load(f)["figures"]


class PublishedTest(unittest.TestCase):
    def check_fit_and_predicted(self, figures, fitted, predicted):
        """The fitted rows back to 0.1%, the predicted one within 5%: the rows by name.
        (The quick forms' figures, from 2026-12-07: torchtitan's 128-GPU row, DGX Cloud's
        16-GPU row and Megatron-Bridge's Qwen3-30B-A3B row all came out within 5%.)"""
        rows = {x["name"]: x for x in figures["rows"]}
        self.assertEqual(set(rows), set(fitted) | {predicted})
        for name in fitted:
            self.assertEqual(rows[name]["role"], "fit")
            self.assertLess(abs(rows[name]["step_error"]), 1e-3, rows[name])
        self.assertEqual(rows[predicted]["role"], "predict")
        self.assertLess(abs(rows[predicted]["predicted_tps"] / rows[predicted]["published_tps"] - 1), 0.05, rows[predicted])
        return rows

    def test_torchtitan_rows_fit_and_predict(self):
        figures = quick_figures("torchtitan_h100")
        rows = self.check_fit_and_predicted(figures, ("8b-fsdp8-bf16", "8b-fsdp8-fp8"), "8b-fsdp128-bf16")
        for row in rows.values():
            self.assertLess(abs(row["memory_error"]), 0.05, row)
        # Float8's speed-up on one host, as fitted: the published 8532 / 6667.
        (pair,) = figures["fp8_speedups"]
        self.assertAlmostEqual(pair["measured"], 8532 / 6667, places=6)
        self.assertAlmostEqual(pair["predicted"], pair["measured"], delta=0.01)

    def test_dgxc_rows_fit_and_predict(self):
        self.check_fit_and_predicted(quick_figures("dgxc_h100"), ("8b-8-bf16", "8b-8-fp8"), "8b-16-bf16")

    def test_torchtitan_attention_rates_fitted(self):
        """--fit-attention on Table 1's rows and the 32K row (three sequence-length shares): the
        fitted rows back to 0.1% and the factor on FlashAttention-2's rates as the docs give it
        (0.747, docs/fidelity.md)."""
        figures = quick_figures("torchtitan_h100", "--attention", os.path.join(ROOT, "examples", "h100-flash2.yaml"),
                                "--fit-attention", "--calibrate", "8b-fsdp8-bf16,8b-fsdp8-fp8,8b-fsdp8-cp1-32k")
        for row in figures["rows"]:
            if row["role"] == "fit":
                self.assertLess(abs(row["step_error"]), 1e-3, row)
        self.assertAlmostEqual(figures["fit"]["attention_scale"], 0.747, delta=0.005)

    def test_mbridge_mixture_of_experts_predicted(self):
        self.check_fit_and_predicted(quick_figures("mbridge_h100"), ("llama3-8b-8-fp8",), "qwen3-30b-a3b-16-fp8")


class AttentionFileTest(unittest.TestCase):
    def test_the_attention_block_joins_the_bench_hardware(self):
        """--attention FILE: the bench's hardware with the file's device.attention times a
        flash-attention model as the file itself does, and not as the preset alone."""
        sys.path.insert(0, ROOT)
        from bench import dgxc_h100, published, torchtitan_h100
        from bench.common import ensure_build
        binary = ensure_build(skip=True)
        example = os.path.join(ROOT, "examples", "h100-flash2.yaml")

        def step(hw):
            r = subprocess.run([binary, "simulate", "--model", os.path.join(ROOT, "examples", "llama-3-8b.json"),
                                "--hardware", hw, "-s", "1f1b", "-k", "4", "-m", "8", "--batch", "32", "--json"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            return json.loads(r.stdout)["summary"]["step_time_s"]

        with tempfile.TemporaryDirectory() as tmp:
            joined = os.path.join(tmp, "dgxc.yaml")
            with open(joined, "w") as f:
                f.write(published.with_attention(dgxc_h100.HARDWARE, example))
            self.assertEqual(step(joined), step(example))
            self.assertGreater(step(joined), step("dgx-h100"))
            # A hardware string that already has a device section keeps its fields beside it.
            text = published.with_attention(torchtitan_h100.HARDWARE, example)
            self.assertIn("  memory_gb: 96\n", text)
            self.assertIn("  attention:\n    forward:", text)
            with self.assertRaises(Exception):
                published.with_attention(dgxc_h100.HARDWARE, os.path.join(ROOT, "presets", "h100.yaml"))


if __name__ == "__main__":
    unittest.main()
