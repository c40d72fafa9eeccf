"""Calibration from torch.profiler traces of PyTorch's own schedules, run
for real: a decoder-only stack of torch.nn.TransformerEncoderLayer on two
ranks over Gloo (examples/python/profile_torch_schedules.py, at a tiny size),
profiled under ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
ScheduleZBVZeroBubble and ScheduleGPipe. pipetwin.calibrate fits a cost
table to two of them (two micro-batch sizes: per-sample times), predicts the
third, and writes the same table as `pipetwin calibrate`; compare holds a run
against its prediction; simulate times another schedule on the table."""
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch  # noqa: F401
except ImportError:  # the fresh virtualenv without torch
    torch = None

import pipetwin as pt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--width", "32", "--heads", "2", "--ffn", "64", "--seq", "16", "--batch", "8"]
BATCH = 8


@unittest.skipIf(torch is None, "needs torch")
class TorchProfilerRuns(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.runs = cls.tmp.name
        script = os.path.join(ROOT, "examples", "python", "profile_torch_schedules.py")
        subprocess.run([sys.executable, script, cls.runs, "--configs", "interleaved1f1b-m4,interleavedzb-m8,zbv-m4,gpipe-m4",
                        "--warmup", "1", "--steps", "2", *TINY], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_dir(self, name):
        return os.path.join(self.runs, name)

    def test_fits_the_stages_and_predicts_a_held_out_schedule(self):
        cal = pt.calibrate([self.run_dir("interleaved1f1b-m4"), self.run_dir("interleavedzb-m8")],
                           held_out=[self.run_dir("zbv-m4")], batch=BATCH)
        self.assertEqual([r.fitted for r in cal.runs], [True, True, False])
        self.assertEqual(len(cal.samples), 4)
        # Every stage's F, B, I and W were timed: 4 and 8 forwards a step, 2 steps each.
        for stage in cal.samples:
            self.assertGreaterEqual(stage["forwards"], 2 * (4 + 8) - 4)
            self.assertEqual(stage["backwards"], 2 * 4)
            self.assertEqual(stage["input_grads"], 2 * 8)
        self.assertIn("per_sample_s", cal.costs_yaml)   # two micro-batch sizes: 2 and 1 samples
        self.assertIn("input_grad_s", cal.costs_yaml)
        for r in cal.runs:
            self.assertGreater(r.predicted_s, 0)
            self.assertEqual(len(r.steps_s), 2)
            self.assertLessEqual(r.measured_min_s, r.measured_median_s)
        # The held-out V-shaped run: its own order (stages 0 and 3 on rank 0) replayed.
        self.assertIn("K=2 V=2 M=4", cal.runs[2].describe)

    def test_the_command_writes_the_same_table(self):
        cli = os.environ.get("PIPETWIN_CLI")
        if not cli:
            self.skipTest("PIPETWIN_CLI not set")
        fit = [self.run_dir("interleaved1f1b-m4"), self.run_dir("interleavedzb-m8")]
        out = os.path.join(self.runs, "costs.yaml")
        subprocess.run([cli, "calibrate", *fit, "--batch", str(BATCH), "--out", out], check=True, stdout=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as f:
            self.assertEqual(f.read(), pt.calibrate(fit, batch=BATCH).costs_yaml)

    def test_compare_and_simulate_on_the_table(self):
        cal = pt.calibrate([self.run_dir("interleaved1f1b-m4"), self.run_dir("interleavedzb-m8")], batch=BATCH)
        prefix = os.path.join(self.runs, "zbv")
        c = pt.compare(self.run_dir("zbv-m4"), costs=cal, batch=BATCH, traces=prefix)
        self.assertIn(c.verdict, ("within noise", "model error", "not meaningful", "unknown"))
        self.assertGreater(c.measured_step_s, 0)
        self.assertGreaterEqual(c.report["matched_actions"], 4 * 4 * 3)  # F, I and W of 4 stages x 4 micro-batches
        self.assertTrue(os.path.exists(prefix + ".predicted.json") and os.path.exists(prefix + ".measured.json"))
        # A schedule PyTorch does not ship, on the same four stages, M = 8 of one sample each.
        program = pt.Program.generate("zb-v", ranks=2, microbatches=8, virtual=2)
        at8 = pt.simulate(program, costs=cal, batch=BATCH).step_time_s
        at4 = pt.simulate(pt.Program.generate("zb-v", ranks=2, microbatches=4, virtual=2), costs=cal, batch=BATCH).step_time_s
        self.assertGreater(at8, 0)
        self.assertNotEqual(at8, at4)  # M=4 has micro-batches of two samples: the per-sample times moved

    def test_gpipe_labels_its_forward_and_backward_ranges(self):
        cal = pt.calibrate(self.run_dir("gpipe-m4"))
        self.assertEqual(len(cal.samples), 2)        # one stage per rank
        self.assertEqual(cal.samples[0]["sends"], 0)  # ScheduleGPipe's ranges hold their sends
        self.assertEqual(cal.samples[1]["backwards"], 2 * 4)

    def test_refuses_runs_of_other_stages(self):
        with self.assertRaises(pt.Error) as e:
            pt.calibrate([self.run_dir("interleaved1f1b-m4"), self.run_dir("gpipe-m4")], batch=BATCH)
        self.assertIn("the runs fitted together must split the model into the same stages", str(e.exception))


if __name__ == "__main__":
    unittest.main()
