"""pipetwin's generators against PyTorch 2.13's own schedule classes
(torch.distributed.pipelining.schedules, imported from the project's
virtualenv), on mock stages as PyTorch's _schedule_visualizer builds them: for
K in {2, 4, 8} x M in 1..16 (x V in {2, 3} where it applies) the per-rank
compute orders are equal, or differ where this file says so, and why; a shape
PyTorch refuses is refused by pipetwin too, unless said otherwise.

    test_pytorch_orders.py PIPETWIN_BINARY
"""

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

    SHAPES = [("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("interleaved-1f1b", 2), ("interleaved-zb", 2),
              ("looped-bfs", 2), ("zb-v", 2)]

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


if __name__ == "__main__":
    unittest.main(verbosity=1)
