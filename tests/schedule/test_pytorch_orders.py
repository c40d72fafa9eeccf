"""pipetwin's generators against PyTorch 2.13's own schedule classes
(torch.distributed.pipelining.schedules, imported from the project's
virtualenv), on mock stages as PyTorch's _schedule_visualizer builds them: for
K in {2, 4, 8} x M in 1..16 (x V in {2, 3} where it applies) the per-rank
compute orders are equal, or differ where this file says so, and why; a shape
PyTorch refuses is refused by pipetwin too, unless said otherwise.

    test_pytorch_orders.py PIPETWIN_BINARY
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
import warnings
from unittest import mock

warnings.filterwarnings("ignore")
from torch.distributed.pipelining import schedules as S  # noqa: E402
from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops  # noqa: E402
from torch.distributed.pipelining.stage import PipelineStage  # noqa: E402

PIPETWIN = sys.argv.pop(1) if len(sys.argv) > 1 else "build/cli/pipetwin"
MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "transformer-24.yaml")
SHAPES = [(K, M) for K in (2, 4, 8) for M in range(1, 17)]


def torch_order(cls, K, M, V=None):
    """PyTorch's pipeline_order, bubbles (None) left out; None when it refuses the shape."""
    try:
        ops = get_schedule_ops(cls, K, M, V)
    except (ValueError, AssertionError, RuntimeError):
        return None
    return [[str(a) for a in rank if a is not None] for rank in ops]


def pipetwin(*args):
    return subprocess.run([PIPETWIN, *map(str, args)], capture_output=True, text=True)


def our_order(name, K, M, V=1):
    """The generator's compute-only order (CSV rows); None when pipetwin refuses the shape."""
    r = pipetwin("schedule", "-s", name, "-k", K, "-m", M, "-v", V, "--compute-only", "--format", "csv")
    if r.returncode != 0:
        assert r.returncode == 1 and r.stderr.startswith("pipetwin: error: schedule " + name), r.stderr
        return None
    return [[cell for cell in line.split(",") if cell] for line in r.stdout.strip().split("\n")]


class Orders(unittest.TestCase):
    def compare(self, name, cls, V=None, adjust=lambda K, order: order, ours_may_accept=False):
        compared = refused = 0
        for K, M in SHAPES:
            with self.subTest(schedule=name, K=K, M=M, V=V):
                theirs, ours = torch_order(cls, K, M, V), our_order(name, K, M, V or 1)
                if theirs is None:
                    refused += 1
                    if not ours_may_accept:
                        self.assertIsNone(ours, f"PyTorch refuses {name} K={K} M={M} V={V}, pipetwin does not")
                    continue
                self.assertIsNotNone(ours, f"pipetwin refuses {name} K={K} M={M} V={V}, PyTorch does not")
                self.assertEqual(adjust(K, theirs), ours)
                compared += 1
        self.assertGreater(compared, 20)
        print(f"{name} V={V or 1}: {compared} shapes equal, {refused} refused by PyTorch")

    def test_gpipe(self):
        # Equal but for PyTorch's REDUCE_GRAD, one per stage after its last backward: the
        # data-parallel reduction, which pipetwin's IR holds only with data replicas.
        def without_reduce(K, order):
            for rank in order:
                self.assertEqual(sum(a.endswith("REDUCE_GRAD") for a in rank), 1)
                self.assertTrue(rank[-1].endswith("REDUCE_GRAD"))
            return [rank[:-1] for rank in order]
        self.compare("gpipe", S.ScheduleGPipe, adjust=without_reduce)

    def test_1f1b(self):
        # PyTorch 2.13's Schedule1F1B._get_pipeline_order numbers the last rank's
        # forwards one ahead (it starts at micro-batch 1 and ends at one that does
        # not exist); renumbered, and without REDUCE_GRAD, the orders are equal.
        # pipetwin's validate refuses PyTorch's list as it is. PyTorch also refuses
        # M < K, which pipetwin's 1f1b runs (warm-up min(K - s, M)).
        def renumbered(K, order):
            order = [[a for a in rank if not a.endswith("REDUCE_GRAD")] for rank in order]
            last = [re.sub(r"^(\d+)F(\d+)$", lambda m: f"{m.group(1)}F{int(m.group(2)) - 1}", a) for a in order[-1]]
            return order[:-1] + [last]
        self.compare("1f1b", S.Schedule1F1B, adjust=renumbered, ours_may_accept=True)
        raw = [[a for a in rank if not a.endswith("REDUCE_GRAD")] for rank in torch_order(S.Schedule1F1B, 4, 8)]
        r = subprocess.run([PIPETWIN, "validate", "/dev/stdin"], input="\n".join(",".join(rank) for rank in raw) + "\n",
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("3F8", r.stderr)  # the forward of a micro-batch that does not exist
        for M in (1, 2, 3):
            self.assertEqual(pipetwin("schedule", "-s", "1f1b", "-k", 4, "-m", M, "--format", "text").returncode, 0)

    def test_interleaved_1f1b(self):
        for V in (2, 3):
            self.compare("interleaved-1f1b", S.ScheduleInterleaved1F1B, V)

    def test_interleaved_zero_bubble(self):
        for V in (2, 3):
            self.compare("interleaved-zb", S.ScheduleInterleavedZeroBubble, V)

    def test_zb_v(self):
        # Two stages per rank, placed V-shaped; PyTorch pads M to 2K-1 and drops the padding.
        self.compare("zb-v", S.ScheduleZBVZeroBubble, 2)

    def test_dualpipe_v(self):
        # Equal, each of PyTorch's OVERLAP_F_B one cell "(0F3;3B1)OVERLAP_F_B" in both (the IR
        # keeps it as one overlapped action).
        self.compare("dualpipe-v", S.ScheduleDualPipeV, 2)

    def test_looped_bfs(self):
        for V in (2, 3):
            self.compare("looped-bfs", S.ScheduleLoopedBFS, V)


def runtime(K, V, M):
    """PyTorch's schedule runtime on V mock stages per rank, as get_schedule_ops builds them."""
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.submod = 0, K, None
    stages = [stage for _ in range(V)]
    for st in stages:
        st.num_stages = V * K
    return S._PipelineScheduleRuntime(stages, M)


class RoundTrip(unittest.TestCase):
    """What `schedule --format pytorch-csv` writes, PyTorch's _load_csv reads and its
    _dump_csv writes back cell for cell, compute-only and with communication. pipedream is
    left out: its optimizer steps inside the schedule are what PyTorch has no action for."""

    SHAPES = [("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("zb-h2", 1), ("interleaved-1f1b", 2), ("interleaved-zb", 2),
              ("looped-bfs", 2), ("zb-v", 2), ("v-half", 2), ("v-min", 2), ("dualpipe-v", 2)]

    def test_pytorch_reads_and_writes_back_every_cell(self):
        checked = 0
        with tempfile.TemporaryDirectory() as tmp:
            for name, V in self.SHAPES:
                for K, M in ((2, 4), (4, 8)):
                    for fmt, flags in (("compute_only", ["--compute-only"]), ("compute_comms", ["--recompute", "full"])):
                        with self.subTest(schedule=name, K=K, M=M, format=fmt):
                            ours = os.path.join(tmp, f"{name}_{K}_{M}_{fmt}.csv")
                            r = pipetwin("schedule", "-s", name, "-k", K, "-m", M, "-v", V, *flags, "--format", "pytorch-csv",
                                         "--out", ours)
                            self.assertEqual(r.returncode, 0, r.stderr)
                            if fmt == "compute_comms":  # the optimizer step and the recomputes are said to be left out
                                self.assertIn("pytorch-csv: left out", r.stderr)
                            rt = runtime(K, V, M)
                            rt._load_csv(ours, fmt)
                            back = os.path.join(tmp, "back.csv")
                            rt._dump_csv(back, fmt)
                            with open(ours) as a, open(back) as b:
                                self.assertEqual(b.read().replace("\r", ""), a.read())
                            checked += 1
        self.assertEqual(checked, len(self.SHAPES) * 4)
        print(f"round trip through PyTorch's _load_csv and _dump_csv: {checked} files, every cell equal")


def schedule_object(cls, K, M, V=None):
    """PyTorch's schedule class on mock stages (V per rank, or one), as get_schedule_ops builds them."""
    n = V or 1
    stages = []
    for _ in range(n):
        st = mock.create_autospec(PipelineStage, instance=True)
        st.group_rank, st.group_size, st.submod, st.num_stages = 0, K, None, K * n
        stages.append(st)
    return cls(stages[0], M) if V is None else cls(stages, M), stages


def write_rows(path, rows):
    with open(path, "w") as f:
        f.write("".join(",".join("" if a is None else str(a) for a in row) + "\n" for row in rows))


class PyTorchFiles(unittest.TestCase):
    """Every CSV PyTorch 2.13 writes of its seven classes, compute-only (its pipeline_order,
    bubbles as empty cells) and with communication (its runtime's own lowering,
    _prepare_schedule_with_comms, dumped by _dump_csv), is read by `validate` and `simulate`
    without edits. With PyTorch's meaning of a RECV (it posts the receive; the runtime waits
    just before the compute that uses the data), the unit-time step count of the file with
    communication equals the compute-only one's (free transfers); for DualPipeV too, as
    pipetwin's lowering also sends both halves' outputs after an OVERLAP_F_B (with each
    send moved back to right after its own half the step is K-1 units shorter)."""

    CLASSES = [("ScheduleGPipe", None), ("Schedule1F1B", None), ("ScheduleLoopedBFS", 2),
               ("ScheduleInterleaved1F1B", 2), ("ScheduleInterleaved1F1B", 3), ("ScheduleInterleavedZeroBubble", 2),
               ("ScheduleZBVZeroBubble", 2), ("ScheduleDualPipeV", 2)]
    SHAPES = [(2, 4), (4, 8), (4, 16)]

    def validate(self, path):
        r = pipetwin("validate", path, "--json")
        return r, (json.loads(r.stdout) if r.returncode == 0 else None)

    def test_every_class_both_formats(self):
        checked = 0
        with tempfile.TemporaryDirectory() as tmp:
            for name, V in self.CLASSES:
                for K, M in self.SHAPES:
                    with self.subTest(schedule=name, K=K, M=M, V=V):
                        try:
                            sched, stages = schedule_object(getattr(S, name), K, M, V)
                        except (ValueError, AssertionError, RuntimeError):
                            continue  # a shape PyTorch refuses (the orders test holds pipetwin's refusals)
                        compute = os.path.join(tmp, f"{name}_{V}_{K}_{M}_compute.csv")
                        write_rows(compute, [sched.pipeline_order[r] for r in range(K)])
                        r, c = self.validate(compute)
                        if name == "Schedule1F1B":
                            # PyTorch 2.13's own 1F1B order numbers the last rank's forwards from 1
                            # (the orders test): refused, naming the rank and action, with the grid.
                            self.assertEqual(r.returncode, 1, r.stdout)
                            self.assertIn(f"rank {K - 1}, step", r.stderr)
                            self.assertIn(f"{K - 1}F{M}", r.stderr)
                            self.assertIn("<-- ERROR HERE", r.stderr)
                            continue
                        self.assertEqual(r.returncode, 0, r.stderr)
                        rt = S._PipelineScheduleRuntime(stages, M)
                        rt._prepare_schedule_with_comms({rank: [a for a in acts if a is None or "REDUCE_GRAD" not in str(a)]
                                                         for rank, acts in sched.pipeline_order.items()})
                        comms = os.path.join(tmp, f"{name}_{V}_{K}_{M}_comms.csv")
                        rt._dump_csv(comms, "compute_comms")
                        r, w = self.validate(comms)
                        self.assertEqual(r.returncode, 0, r.stderr)
                        self.assertIn("UNSHARD/RESHARD (FSDP): kept", r.stderr)
                        self.assertEqual(w["dry_run_steps"], c["dry_run_steps"])
                        if name == "ScheduleDualPipeV":
                            self.assertIn("OVERLAP_F_B: kept as overlapped actions; the executor runs each one's "
                                          "sub-actions one after the other", r.stderr)
                            own = os.path.join(tmp, "sends_after_own_half.csv")
                            write_rows(own, sends_after_own_half(comms))
                            r, o = self.validate(own)
                            self.assertEqual(r.returncode, 0, r.stderr)
                            self.assertEqual(o["dry_run_steps"], c["dry_run_steps"] - (K - 1))
                        for path in (compute, comms):
                            s = pipetwin("simulate", "-s", path, "--model", MODEL, "--hardware", "a100", "--json")
                            self.assertEqual(s.returncode, 0, s.stderr)
                            self.assertGreater(json.loads(s.stdout)["summary"]["step_time_s"], 0)
                        checked += 1
        self.assertGreaterEqual(checked, 15)
        print(f"PyTorch's own CSVs: {checked} (class, V, K, M) read compute-only and with communication, "
              "equal unit-time step counts")

    def test_the_dualpipev_files_the_executor_tests_run_are_pytorchs(self):
        # tests/exec/models/pytorch_dualpipev_k2_m4*.csv, as PyTorch writes them today.
        sched, stages = schedule_object(S.ScheduleDualPipeV, 2, 4, 2)
        models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "exec", "models")
        with tempfile.TemporaryDirectory() as tmp:
            compute = os.path.join(tmp, "c.csv")
            write_rows(compute, [sched.pipeline_order[r] for r in range(2)])
            rt = S._PipelineScheduleRuntime(stages, 4)
            rt._prepare_schedule_with_comms(sched.pipeline_order)
            comms = os.path.join(tmp, "w.csv")
            rt._dump_csv(comms, "compute_comms")
            for ours, theirs in (("pytorch_dualpipev_k2_m4.csv", compute), ("pytorch_dualpipev_k2_m4_comms.csv", comms)):
                with open(os.path.join(models, ours)) as a, open(theirs) as b:
                    self.assertEqual(a.read(), b.read().replace("\r", ""), ours)

    def test_a_receive_waits_where_its_data_is_used(self):
        # Interleaved1F1B K=4 V=3 M=16: its receives taken as blocking where they stand made
        # the step 219 units long; PyTorch's meaning gives the 102 its compute order allows.
        sched, stages = schedule_object(S.ScheduleInterleaved1F1B, 4, 16, 3)
        rt = S._PipelineScheduleRuntime(stages, 16)
        rt._prepare_schedule_with_comms(sched.pipeline_order)
        with tempfile.TemporaryDirectory() as tmp:
            comms = os.path.join(tmp, "i1f1b.csv")
            rt._dump_csv(comms, "compute_comms")
            r, w = self.validate(comms)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(w["dry_run_steps"], 102)
            self.assertIn("receives waited for where their data is used", r.stderr)


class FsdpActions(unittest.TestCase):
    """FSDP's UNSHARD and RESHARD: `schedule --max-active-stages 3` places them where PyTorch
    2.13's runtime lowering (_add_unshard_reshard, max_active_stages 3) does, among the compute
    actions of every rank, for each multi-stage class PyTorch lowers so; and PyTorch's own
    file, its actions kept, simulates as the generator with them does."""

    CASES = [("looped-bfs", "ScheduleLoopedBFS", V) for V in (2, 3, 4)] + \
            [("interleaved-1f1b", "ScheduleInterleaved1F1B", V) for V in (2, 3, 4)] + \
            [("interleaved-zb", "ScheduleInterleavedZeroBubble", 2), ("zb-v", "ScheduleZBVZeroBubble", 2),
             ("dualpipe-v", "ScheduleDualPipeV", 2)]
    SHAPES = [(2, 2), (2, 4), (4, 8), (4, 16)]

    @staticmethod
    def compute_and_fsdp(rows):
        keep = re.compile(r"(\d+(F|B|I|W|UNSHARD|RESHARD)\d*|\(.*\)OVERLAP_F_B)")
        return [[c for c in row if keep.fullmatch(c)] for row in rows]

    def test_placed_as_pytorchs_runtime_places_them(self):
        compared = churned = 0
        for gen, name, V in self.CASES:
            for K, M in self.SHAPES:
                with self.subTest(schedule=name, K=K, M=M, V=V):
                    try:
                        sched, stages = schedule_object(getattr(S, name), K, M, V)
                    except (ValueError, AssertionError, RuntimeError):
                        continue
                    rt = S._PipelineScheduleRuntime(stages, M)
                    rt._prepare_schedule_with_comms({rank: [a for a in acts if a is None or "REDUCE_GRAD" not in str(a)]
                                                     for rank, acts in sched.pipeline_order.items()})
                    theirs = self.compute_and_fsdp([[str(a) for a in rt.pipeline_order_with_comms[r]] for r in range(K)])
                    r = pipetwin("schedule", "-s", gen, "-k", K, "-m", M, "-v", V, "--max-active-stages", 3,
                                 "--format", "pytorch-csv")
                    self.assertEqual(r.returncode, 0, r.stderr)
                    ours = self.compute_and_fsdp([line.split(",") for line in r.stdout.strip().split("\n")])
                    self.assertEqual(theirs, ours)
                    unshards = sum(c.endswith("UNSHARD") for row in ours for c in row)
                    self.assertGreaterEqual(unshards, K * V)
                    churned += unshards > K * V
                    compared += 1
        self.assertGreaterEqual(compared, 30)
        self.assertGreater(churned, 0)  # V > 3 gathers some stages more than once a step
        print(f"UNSHARD/RESHARD: {compared} (class, V, K, M) placed as PyTorch's runtime does, "
              f"{churned} gathering a stage more than once a step")

    def test_pytorchs_file_simulates_as_the_generator_with_three_active(self):
        # ZeRO-3 keeping the weights over D = 2: PyTorch's own file with communication (its
        # UNSHARD/RESHARD kept) and pipetwin's generator with --max-active-stages 3 give the
        # same step time and peak memory; without the actions the peak holds every stage whole.
        common = ["--model", MODEL, "--hardware", "a100", "-d", 2, "--zero", 3, "--reshard-after-forward", "off", "--json"]

        def figures(*args):
            r = pipetwin("simulate", *args, *common)
            self.assertEqual(r.returncode, 0, r.stderr)
            s = json.loads(r.stdout)["summary"]
            return s["step_time_s"], max(m["peak_bytes"] for m in s["memory_per_rank"])

        with tempfile.TemporaryDirectory() as tmp:
            for gen, name, K, M, V in [("looped-bfs", "ScheduleLoopedBFS", 2, 4, 4),
                                       ("interleaved-1f1b", "ScheduleInterleaved1F1B", 2, 4, 4),
                                       ("dualpipe-v", "ScheduleDualPipeV", 2, 4, 2)]:
                with self.subTest(schedule=name):
                    sched, stages = schedule_object(getattr(S, name), K, M, V)
                    rt = S._PipelineScheduleRuntime(stages, M)
                    rt._prepare_schedule_with_comms(sched.pipeline_order)
                    path = os.path.join(tmp, f"{name}.csv")
                    rt._dump_csv(path, "compute_comms")
                    theirs = figures("-s", path)
                    ours = figures("-s", gen, "-k", K, "-m", M, "-v", V, "--max-active-stages", 3)
                    self.assertAlmostEqual(theirs[0], ours[0], delta=1e-9 * ours[0])
                    self.assertEqual(theirs[1], ours[1])
                    kept = figures("-s", gen, "-k", K, "-m", M, "-v", V)
                    if V > 3:
                        self.assertLess(ours[1], kept[1])
                    print(f"{name} K={K} M={M} V={V}, D=2 ZeRO-3 weights kept: step {theirs[0]:.6f} s from PyTorch's "
                          f"file, {ours[0]:.6f} s from the generator with 3 active; peak {ours[1] / 1e9:.3f} GB "
                          f"({kept[1] / 1e9:.3f} GB every stage kept)")


def sends_after_own_half(path):
    """The rows of a CSV with communication, each OVERLAP_F_B written as its halves and
    each SEND moved back to right after the half (or compute) that produced its tensor."""
    rows = []
    with open(path) as f:
        for line in f.read().split("\n"):
            if not line:
                continue
            cells = line.split(",")
            sends = {c for c in cells if "SEND_" in c}
            out = []
            for c in cells:
                if c in sends:
                    continue
                for h in c[1:c.index(")")].split(";") if c.startswith("(") else [c]:
                    out.append(h)
                    m = re.fullmatch(r"(\d+)([FBI])(\d+)", h)
                    send = m and f"{m[1]}SEND_{'F' if m[2] == 'F' else 'B'}{m[3]}"
                    if send in sends:
                        out.append(send)
            rows.append(out)
    return rows

if __name__ == "__main__":
    unittest.main(verbosity=1)
