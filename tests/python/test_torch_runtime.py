"""pipetwin's schedules that PyTorch does not ship (zb-h2, v-half), run by
PyTorch's own action-list runtime on real PipelineStages over Gloo, K
processes on this CPU: the losses and every parameter's gradient equal
ScheduleGPipe's (zb-h2, same stages) and one process's (v-half, V-shaped
stages) within fp32 tolerance. The model is none of pipetwin's: a stack of
torch.nn.TransformerEncoderLayer blocks and a linear head."""
import os
import socket
import sys
import tempfile
import unittest

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
except ImportError:  # the fresh virtualenv without torch
    torch = None

import pipetwin as pt

D, SEQ, BATCH, M = 16, 6, 8, 4


def blocks(n):
    torch.manual_seed(0)
    layers = [torch.nn.TransformerEncoderLayer(D, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
              for _ in range(n - 1)]
    return layers + [torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(SEQ * D, 3))]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, SEQ, D, generator=g), torch.randn(BATCH, 3, generator=g)


def loss_fn(output, target):
    return torch.nn.functional.mse_loss(output, target)


def reference(n):
    """One process: the micro-batches' mean loss and its gradients."""
    model = torch.nn.Sequential(*blocks(n))
    x, y = data()
    losses = [loss_fn(model(xm), ym) for xm, ym in zip(x.chunk(M), y.chunk(M))]
    (sum(losses) / M).backward()
    return [l.item() for l in losses], [p.grad.clone() for p in model.parameters()]


def worker(rank, world, port, program_text, n_stages, use_gpipe, with_comms, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        program = pt.Program.parse(program_text)
        mine = [s for s in range(n_stages) if rank in _ranks_of(program, s)]
        layers = blocks(n_stages)
        stages = [PipelineStage(layers[s], s, n_stages, torch.device("cpu")) for s in mine]
        if use_gpipe:
            schedule = ScheduleGPipe(stages[0], M, loss_fn=loss_fn, scale_grads=True)
        else:
            schedule = pt.pytorch.runtime(program, stages, loss_fn=loss_fn, scale_grads=True, with_comms=with_comms)
        x, y = data()
        losses = []
        kwargs = {}
        if 0 in mine:
            kwargs["args"] = (x,)
        if n_stages - 1 in mine:
            kwargs["target"], kwargs["losses"] = y, losses
        schedule.step(*kwargs.pop("args", ()), **kwargs)
        grads = {s: [p.grad.clone() for p in layers[s].parameters()] for s in mine}
        torch.save({"losses": [l.item() for l in losses], "grads": grads}, os.path.join(out, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _ranks_of(program, stage):
    return {r for r, actions in enumerate(program.actions()) for a in actions if a.startswith(f"{stage}F")}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipIf(torch is None, "torch is not installed in this virtualenv")
class TorchRuntimeTest(unittest.TestCase):
    def run_pipeline(self, program, n_stages, use_gpipe=False, with_comms=False):
        with tempfile.TemporaryDirectory() as out:
            mp.spawn(worker, args=(program.ranks, free_port(), program.to_text(), n_stages, use_gpipe, with_comms, out),
                     nprocs=program.ranks, join=True)
            losses, grads = [], {}
            for r in range(program.ranks):
                got = torch.load(os.path.join(out, f"{r}.pt"))
                losses += got["losses"]
                grads.update(got["grads"])
        return losses, [g for s in range(n_stages) for g in grads[s]]

    def assert_same(self, a, b):
        (la, ga), (lb, gb) = a, b
        self.assertEqual(len(la), M)
        for x, y in zip(la, lb):
            self.assertAlmostEqual(x, y, delta=1e-6 * max(1.0, abs(y)))
        self.assertEqual(len(ga), len(gb))
        for x, y in zip(ga, gb):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)

    def test_zb_h2_trains_like_gpipe(self):
        zb = pt.Program.generate("zb-h2", ranks=2, microbatches=M)
        gpipe = pt.Program.generate("gpipe", ranks=2, microbatches=M)
        ours = self.run_pipeline(zb, 2)
        theirs = self.run_pipeline(gpipe, 2, use_gpipe=True)
        self.assert_same(ours, theirs)
        self.assert_same(ours, reference(2))
        # pipetwin's own transfer placement: its messages keep their order between the two ranks.
        self.assert_same(self.run_pipeline(zb, 2, with_comms=True), theirs)

    def test_v_half_trains_like_one_process(self):
        program = pt.Program.generate("v-half", ranks=2, microbatches=M)
        self.assertEqual(program.stages, 4)
        self.assert_same(self.run_pipeline(program, 4), reference(4))

    def test_pipetwins_transfers_in_another_order_are_refused(self):
        # v-half's receives on rank 1 wait where they are used: 2RECV_B0 before
        # 1RECV_F2, which rank 0 sent first. PyTorch matches a pair's messages
        # in order: the runtime is refused with pipetwin's placement, and runs
        # with PyTorch's (test_v_half_trains_like_one_process).
        with self.assertRaises(pt.Error) as e:
            pt.pytorch.check_fifo(pt.Program.generate("v-half", ranks=2, microbatches=M))
        self.assertIn("v-half: rank 0 sends 0SEND_F2 to rank 1 where rank 1 receives 2RECV_B0", str(e.exception))
        pt.pytorch.check_fifo(pt.Program.generate("zb-h2", ranks=2, microbatches=M))

    def test_pipetwins_own_transfers_or_pytorchs(self):
        program = pt.Program.generate("zb-h2", ranks=2, microbatches=M)
        rows = program.pipeline_order(with_comms=True)
        self.assertIn("0SEND_F0", rows[0])
        self.assertNotIn("0SEND_F0", program.pipeline_order()[0])
        compute = {r: [a for a in row if a and "SEND" not in a and "RECV" not in a] for r, row in rows.items()}
        self.assertEqual(compute, {r: [a for a in row if a] for r, row in program.pipeline_order().items()})


if __name__ == "__main__":
    unittest.main()
