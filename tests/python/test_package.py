"""The pipetwin Python package against closed forms, PyTorch's own schedule
classes and the command line (run by tests/python/run.sh in a fresh
virtualenv after `pip install .`)."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import pipetwin as pt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
UNIFORM = {"stages": [{"forward_s": 0.010, "backward_s": 0.020, "activation_bytes": 1e9, "weights_bytes": 2e9}]}


class ProgramTest(unittest.TestCase):
    def test_generators_and_their_shape(self):
        self.assertIn("zb-h2", pt.generators())
        p = pt.Program.generate("interleaved-1f1b", ranks=4, microbatches=8, virtual=2)
        self.assertEqual((p.ranks, p.virtual, p.microbatches, p.stages), (4, 2, 8, 8))
        self.assertEqual(sum(len(r) for r in compute(p)), 2 * 8 * 8)  # an F and a B per stage and micro-batch
        self.assertTrue(any("SEND_F" in a for a in p.actions(lowered=True)[0]))
        imported = pt.Program.parse("0F0,0F1,,0B0,0B1\n,1F0,1B0,1F1,1B1\n", "s.csv")  # PyTorch's compute-only CSV
        self.assertFalse(any("SEND_F" in a for a in imported.actions()[0]))
        self.assertTrue(any("SEND_F" in a for a in imported.actions(lowered=True)[0]))

    def test_text_round_trip_and_bad_text(self):
        p = pt.Program.generate("zb-h1", ranks=3, microbatches=6)
        again = pt.Program.parse(p.to_text())
        self.assertEqual(again.actions(), p.actions())
        self.assertEqual(pt.Program.parse(p.to_json()).actions(), p.actions())
        with self.assertRaises(pt.Error) as e:
            pt.Program.parse("rank 0: 0F0 0X0\n", "s.txt")
        self.assertIn("s.txt:1: invalid action '0X0'", str(e.exception))
        self.assertTrue(issubclass(pt.Error, ValueError))

    def test_grid_and_validate(self):
        grid = pt.Program.generate("1f1b", ranks=2, microbatches=2).grid()
        self.assertIn("0F0", grid)
        bad = pt.Program.parse(
            "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1\n"
            "rank 1: 1RECV_F1 1F1 1RECV_F0 1F0 1B0 1SEND_B0 1B1 1SEND_B1\n")
        with self.assertRaises(pt.Error) as e:
            bad.validate()
        self.assertIn("deadlock", str(e.exception))


def compute(program):
    """Every rank's F, B, I and W actions, in order (what a schedule decides)."""
    return [[a for a in rank if a.strip("0123456789") in ("F", "B", "I", "W")] for rank in program.actions()]


class TorchScheduleTest(unittest.TestCase):
    """Programs from PyTorch's own schedule objects: the same orders as pipetwin's generators."""

    def schedule(self, cls, ranks, microbatches, per_rank=1):
        from unittest import mock

        from torch.distributed.pipelining.stage import PipelineStage
        stage = mock.create_autospec(PipelineStage, instance=True)  # pipeline_order needs only the stage count
        stage.group_rank, stage.group_size, stage.submod = 0, ranks, None
        stage.num_stages = ranks * per_rank
        return cls(stage if per_rank == 1 else [stage] * per_rank, microbatches)

    def test_torch_schedules_match_the_generators(self):
        try:
            import torch.distributed.pipelining.schedules as s
        except ImportError:
            self.skipTest("torch is not installed in this virtualenv")
        for cls, name, per_rank in [(s.ScheduleGPipe, "gpipe", 1), (s.Schedule1F1B, "1f1b", 1),
                                    (s.ScheduleInterleaved1F1B, "interleaved-1f1b", 2)]:
            with self.subTest(name):
                schedule = self.schedule(cls, 4, 8, per_rank)
                last = [str(a) for a in schedule.pipeline_order[3] if a is not None]
                if name == "1f1b" and "3F0" not in last:
                    # PyTorch 2.13's Schedule1F1B._get_pipeline_order numbers the
                    # last rank's forwards 1..M (its runtime runs 0..M-1): refused.
                    with self.assertRaises(pt.Error) as e:
                        pt.Program.from_torch(schedule)
                    self.assertIn("Schedule1F1B's pipeline order: invalid schedule: rank 3", str(e.exception))
                    self.assertEqual(pt.Program.from_torch(schedule, validate=False).microbatches, 9)
                    continue
                theirs = pt.Program.from_torch(schedule)
                ours = pt.Program.generate(name, ranks=4, microbatches=8, virtual=per_rank)
                self.assertEqual((theirs.ranks, theirs.virtual, theirs.microbatches), (4, per_rank, 8))
                self.assertEqual(compute(theirs), compute(ours))
                a = pt.simulate(theirs, costs=UNIFORM).step_time_s
                b = pt.simulate(ours, costs=UNIFORM).step_time_s
                self.assertAlmostEqual(a, b, places=12)

    def test_from_a_list_and_a_dict(self):
        order = {0: ["0F0", "0F1", None, "0B0", "0B1"], 1: [None, "1F0", "1B0", "1F1", "1B1"]}
        p = pt.Program.from_torch(order)
        self.assertEqual((p.ranks, p.microbatches), (2, 2))
        self.assertEqual(pt.Program.from_torch(list(order.values())).actions(), p.actions())
        with self.assertRaises(pt.Error) as e:
            pt.Program.from_torch(object())
        self.assertIn("has no pipeline_order", str(e.exception))


class SimulateTest(unittest.TestCase):
    def test_gpipe_closed_form_and_memory(self):
        K, M = 4, 8
        r = pt.simulate(pt.Program.generate("gpipe", ranks=K, microbatches=M), costs=UNIFORM)
        self.assertAlmostEqual(r.step_time_s, (M + K - 1) * 0.030, places=12)
        self.assertAlmostEqual(r.bubble, (K - 1) / (M + K - 1), places=12)
        self.assertEqual(r.memory[0].peak_stashed_microbatches, M)
        self.assertAlmostEqual(r.memory[0].activations, M * 1e9)
        self.assertIsNone(r.memory[0].capacity_bytes)
        self.assertTrue(r.fits)
        self.assertEqual(len([a for a in r.timeline if a.rank == 0 and a.action == "0F0"]), 1)

    def test_zero_bubble_schedules_pytorch_lacks(self):
        split = {"stages": [{"forward_s": 0.01, "input_grad_s": 0.01, "weight_grad_s": 0.01}]}
        f1b = pt.simulate(pt.Program.generate("1f1b", ranks=4, microbatches=8), costs=split)
        for name in ("zb-h1", "zb-h2"):
            zb = pt.simulate(pt.Program.generate(name, ranks=4, microbatches=8), costs=split)
            self.assertLess(zb.step_time_s, f1b.step_time_s)
        v = pt.simulate(pt.Program.generate("v-half", ranks=4, microbatches=8), costs=split)
        self.assertEqual(len(v.memory), 8)
        with self.assertRaises(pt.Error) as e:
            pt.simulate(pt.Program.generate("zb-h1", ranks=4, microbatches=8), costs=UNIFORM)
        self.assertIn("give input_grad_s and weight_grad_s", str(e.exception))

    def test_a_dataframe_a_file_and_the_cli_agree(self):
        program = pt.Program.generate("1f1b", ranks=4, microbatches=8)
        path = os.path.join(EXAMPLES, "own-costs.yaml")
        from_file = pt.simulate(program, costs=path)
        cli = os.environ.get("PIPETWIN_CLI")
        if cli:
            out = subprocess.run([cli, "simulate", "--costs", path, "-s", "1f1b", "-k", "4", "-m", "8", "--json"],
                                 check=True, capture_output=True, text=True).stdout
            self.assertEqual(json.loads(out)["summary"]["step_time_s"], from_file.step_time_s)
        try:
            import pandas as pd
        except ImportError:
            return
        frame = pd.DataFrame([{"stage": s, "forward_s": 0.01 * (1 + s), "backward_s": 0.02 * (1 + s)} for s in range(4)])
        r = pt.simulate(program, costs=frame)
        self.assertAlmostEqual(r.step_time_s, sum(0.03 * (1 + s) for s in range(3)) + 8 * 0.12, places=9)
        timeline = r.to_pandas()
        self.assertEqual(set(timeline["op"]) >= {"F", "B"}, True)
        self.assertAlmostEqual(timeline["end"].max(), r.step_time_s)

    def test_a_csv_table_names_its_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "c.csv")
            with open(path, "w") as f:
                f.write("forward_s,backward_s\n0.01,0.02\n0.01,slow\n")
            with self.assertRaises(pt.Error) as e:
                pt.simulate(pt.Program.generate("1f1b", ranks=2, microbatches=4), costs=path)
            self.assertIn("c.csv:3: field 'stages[1].backward_s': expected a number, got 'slow'", str(e.exception))

    def test_a_model_on_a_hardware(self):
        r = pt.simulate(pt.Program.generate("1f1b", ranks=2, microbatches=4),
                        model=os.path.join(EXAMPLES, "transformer-small.yaml"), hardware="a100", batch=8)
        self.assertGreater(r.step_time_s, 0)
        self.assertEqual(len(r.memory), 2)
        self.assertFalse(math.isinf(r.memory[0].capacity_bytes))
        with self.assertRaises(pt.Error):
            pt.simulate(pt.Program.generate("1f1b", ranks=2, microbatches=4), costs=UNIFORM,
                        model=os.path.join(EXAMPLES, "transformer-small.yaml"))

    def test_zero_shards_over_the_data_group(self):
        program = pt.Program.generate("1f1b", ranks=2, microbatches=4)
        model = os.path.join(EXAMPLES, "transformer-small.yaml")
        runs = {z: pt.simulate(program, model=model, hardware="a100", batch=16, data=4, zero=z) for z in (0, 2, 3)}
        for z, r in runs.items():
            self.assertIn("ZeRO-%d" % z if z else "D=4", r.headline)
        # ZeRO-2 divides the gradients over D = 4, ZeRO-3 the weights too.
        self.assertAlmostEqual(runs[2].memory[0].gradients, runs[0].memory[0].gradients / 4, delta=1)
        self.assertAlmostEqual(runs[3].memory[0].weights, runs[0].memory[0].weights / 4, delta=1)
        with self.assertRaises(pt.Error) as e:
            pt.simulate(program, model=model, hardware="a100", batch=16, zero=2)
        self.assertIn("--zero 2 needs --data D > 1", str(e.exception))

    def test_experts_split_over_the_expert_group(self):
        program = pt.Program.generate("1f1b", ranks=2, microbatches=4)
        model = os.path.join(EXAMPLES, "moe-small.yaml")
        runs = {e: pt.simulate(program, model=model, hardware="dgx-h100", batch=16, data=4, expert=e) for e in (1, 4)}
        self.assertIn("E=4", runs[4].headline)
        # A quarter of the experts on each device: fewer weights, and the
        # dispatch and combine in each pass (the step may still be shorter:
        # the experts' gradients are reduced over D / E replicas, here one).
        self.assertLess(runs[4].memory[0].weights, runs[1].memory[0].weights)
        self.assertGreater(runs[4].busy_s[0], runs[1].busy_s[0])
        plan = pt.plan(model, "dgx-h100", 8, 32, max_pp=2, microbatch_sizes=[1], schedules=["1f1b"], top_sim=0,
                       expert=[1, 2])
        self.assertEqual({c["expert"] for c in plan.candidates}, {1, 2})
        with self.assertRaises(pt.Error) as e:
            pt.simulate(program, model=model, hardware="dgx-h100", batch=16, data=2, expert=4)
        self.assertIn("--expert 4 does not divide", str(e.exception))

    def test_sweep_rows_are_the_commands(self):
        model = os.path.join(EXAMPLES, "transformer-small.yaml")
        r = pt.sweep(model, "cpu", ["gpipe", "1f1b"], 2, [4, 8], microbatch_sizes=2, engine="fast")
        self.assertEqual(len(r.rows), 4)
        self.assertEqual({(row["schedule"], row["microbatches"]) for row in r.rows},
                         {("gpipe", 4), ("gpipe", 8), ("1f1b", 4), ("1f1b", 8)})
        gpipe = {row["microbatches"]: row for row in r.rows if row["schedule"] == "gpipe"}
        self.assertLess(gpipe[8]["bubble_fraction"], gpipe[4]["bubble_fraction"])  # (K-1)/(M+K-1) falls with M
        cli = os.environ.get("PIPETWIN_CLI")
        if cli:
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "s.csv")
                subprocess.run([cli, "sweep", "--model", model, "--hardware", "cpu", "-s", "gpipe,1f1b", "-k", "2",
                                "-m", "4,8", "--microbatch-size", "2", "--engine", "fast", "--out", out], check=True,
                               capture_output=True)
                with open(out) as f:
                    self.assertEqual(f.read(), r.csv)
        with self.assertRaises(pt.Error):
            pt.sweep(model, "cpu", ["gpipe"], 2, 4, batch=7)  # 7 samples do not split into 4 micro-batches

    def test_plan_ranks_like_the_command(self):
        model = os.path.join(EXAMPLES, "transformer-small.yaml")
        r = pt.plan(model, "a100", 4, 16, microbatch_sizes=[1, 2], recompute=["none"], top_sim=0)
        ranked = r.ranking()
        self.assertGreater(len(ranked), 1)
        speeds = [c["throughput_samples_per_s"] for c in ranked]
        self.assertEqual(speeds, sorted(speeds, reverse=True))
        for c in r.candidates:
            self.assertEqual(c["tensor"] * c["pipeline"] * c["data"], 4)
        cli = os.environ.get("PIPETWIN_CLI")
        if cli:
            out = subprocess.run([cli, "plan", "--model", model, "--hardware", "a100", "-n", "4", "-b", "16",
                                  "--microbatch-sizes", "1,2", "--recompute", "none", "--top-sim", "0", "--json",
                                  "--top", "3"], check=True, capture_output=True, text=True).stdout
            top = json.loads(out)["top"]
            self.assertEqual([c["index"] for c in top], [c["index"] for c in ranked[:3]])
            self.assertEqual([c["step_time_s"] for c in top], [c["step_time_s"] for c in ranked[:3]])

    def test_calibrate_runs_finds_the_curve_that_made_them(self):
        """Runs simulated on an H100 curve of max 0.45, half_flops 1e10, fitted from the
        preset's: the curve comes back, as ``pipetwin calibrate --runs`` gives it."""
        model = os.path.join(EXAMPLES, "transformer-small.yaml")
        with tempfile.TemporaryDirectory() as tmp:
            truth = os.path.join(tmp, "truth.yaml")
            with open(truth, "w") as f:
                f.write("preset: h100\ndevice:\n  efficiency: {max: 0.45, half_flops: 1e10}\n  memory_efficiency: 0.6\n")
            rows = ["name,model,hardware,tensor,pipeline,data,microbatches,microbatch_size,schedule,recompute,"
                    "partition,step_s,role"]
            for name, k, m, b, role in (("k1", 1, 4, 4, "fit"), ("k2", 2, 8, 2, "fit"), ("k4", 4, 8, 4, "fit"),
                                        ("k2-m16", 2, 16, 1, "predict")):
                program = pt.Program.generate("1f1b", ranks=k, microbatches=m)
                step = pt.simulate(program, model=model, hardware=truth, batch=m * b, partition="uniform").step_time_s
                rows.append("%s,%s,h100,1,%d,1,%d,%d,1f1b,none,uniform,%.9g,%s" % (name, model, k, m, b, step, role))
            runs = os.path.join(tmp, "runs.csv")
            with open(runs, "w") as f:
                f.write("\n".join(rows) + "\n")
            fit = pt.calibrate_runs(runs, jobs=1)
            self.assertAlmostEqual(fit.max, 0.45, delta=0.45 * 0.005)
            self.assertEqual(fit.half_flops, 1e10)
            self.assertEqual(fit.attention_scale, 0)
            self.assertLess(fit.worst_error, 0.005)
            self.assertEqual([r["role"] for r in fit.runs], ["fit", "fit", "fit", "predict"])
            self.assertIn("half_flops: 1e+10", fit.hardware_yaml)
            self.assertIn("fitted: efficiency max", str(fit))
            with self.assertRaises(pt.Error) as e:
                pt.calibrate_runs(runs, fit=["k9"])
            self.assertIn("k9", str(e.exception))
            cli = os.environ.get("PIPETWIN_CLI")
            if cli:
                out = subprocess.run([cli, "calibrate", "--runs", runs, "--jobs", "1", "--json"], check=True,
                                     capture_output=True, text=True).stdout
                self.assertEqual([r["predicted_step_s"] for r in json.loads(out)["runs"]],
                                 [r["predicted_step_s"] for r in fit.runs])
            try:
                import pandas  # noqa: F401
            except ImportError:
                return
            self.assertEqual(list(fit.to_pandas()["name"]), ["k1", "k2", "k4", "k2-m16"])

    def test_sweep_and_plan_take_zeros_stages(self):
        model = os.path.join(EXAMPLES, "transformer-small.yaml")
        r = pt.sweep(model, "a100", "1f1b", 2, 4, data=[2, 4], zero=3, shard_group=2)
        self.assertEqual([row["status"] for row in r.rows], ["ok", "ok"])
        whole = pt.sweep(model, "a100", "1f1b", 2, 4, data=[2, 4], zero=3)
        # D = 2 is at most the group: sharded over both, as without groups; D = 4 in two groups of 2.
        self.assertEqual(r.rows[0]["step_time_s"], whole.rows[0]["step_time_s"])
        self.assertLess(r.rows[1]["max_stage_memory_gb"], whole.rows[1]["max_stage_memory_gb"] * 2)
        self.assertGreater(r.rows[1]["max_stage_memory_gb"], whole.rows[1]["max_stage_memory_gb"])
        p = pt.plan(model, "a100", 4, 16, microbatch_sizes=[1], recompute=["none"], top_sim=0, zero=[0, 3])
        self.assertEqual({c["zero"] for c in p.candidates if c["data"] > 1}, {0, 3})
        self.assertEqual({c["zero"] for c in p.candidates if c["data"] == 1}, {0})
        # HSDP's groups searched where ZeRO shards: on 4 GPUs only D = 4 has groups of 2.
        h = pt.plan(model, "a100", 4, 16, microbatch_sizes=[1], recompute=["none"], top_sim=0, zero=[0, 3],
                    shard_group=[2])
        grouped = [c for c in h.candidates if c["shard_group"] == 2]
        self.assertTrue(grouped)
        self.assertEqual({(c["zero"], c["data"]) for c in grouped}, {(3, 4)})
        self.assertEqual(len(h.candidates), len(p.candidates) + len(grouped))

    def test_fp8_in_simulate_sweep_and_plan(self):
        program = pt.Program.generate("1f1b", ranks=2, microbatches=4)
        model = os.path.join(EXAMPLES, "gpt-1.7b.yaml")
        bf16 = pt.simulate(program, model=model, hardware="h100", batch=8)
        fp8 = pt.simulate(program, model=model, hardware="h100", batch=8, precision="fp8")
        self.assertLess(fp8.step_time_s, bf16.step_time_s)
        self.assertGreater(fp8.memory[0].workspace, bf16.memory[0].workspace)  # the computing layer cast to FP8
        with self.assertRaises(pt.Error) as e:
            pt.simulate(program, model=model, hardware="a100", batch=8, precision="fp8")
        self.assertIn("no FP8 rate", str(e.exception))
        rows = pt.sweep(model, "h100", "1f1b", 2, 4, microbatch_sizes=2, precision="fp8").rows
        self.assertAlmostEqual(rows[0]["step_time_s"], fp8.step_time_s, delta=1e-6 * fp8.step_time_s)
        p = pt.plan(model, "h100", 2, 8, microbatch_sizes=[1], recompute=["none"], top_sim=0, precision="fp8")
        self.assertIn("precision fp8", p.description)

    def test_compare_two_of_pipetwins_traces(self):
        cli = os.environ.get("PIPETWIN_CLI")
        if not cli:
            self.skipTest("PIPETWIN_CLI not set")
        model = os.path.join(EXAMPLES, "transformer-small.yaml")
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
            for path, hardware in ((a, "cpu"), (b, "cpu")):
                subprocess.run([cli, "simulate", "--model", model, "--hardware", hardware, "-s", "1f1b", "-k", "2", "-m",
                                "4", "--trace", path], check=True, capture_output=True)
            c = pt.compare(b, predicted=a)
            self.assertEqual(c.error, 0.0)  # the same configuration predicted twice: the same timeline
            self.assertGreater(c.report["matched_actions"], 0)
            out = subprocess.run([cli, "compare", a, b, "--json"], check=True, capture_output=True, text=True).stdout
            self.assertEqual(json.loads(out)["step_time_s"], c.report["step_time_s"])
            with self.assertRaises(pt.Error):
                pt.compare(b, costs=UNIFORM, predicted=a)

    def test_gantt_is_a_figure(self):
        try:
            import matplotlib
        except ImportError:
            self.skipTest("matplotlib is not installed in this virtualenv")
        matplotlib.use("Agg")
        r = pt.simulate(pt.Program.generate("zb-h1", ranks=3, microbatches=6),
                        costs={"stages": [{"forward_s": 1, "input_grad_s": 1, "weight_grad_s": 1, "output_bytes": 1e6}],
                               "link": {"bandwidth": 1e7}})
        fig = r.gantt()
        self.assertEqual(len(fig.axes), 1)
        self.assertGreaterEqual(len(fig.axes[0].collections), len(r.timeline))


if __name__ == "__main__":
    unittest.main()
