"""A pipetwin-only schedule trains a PyTorch model through PyTorch's own runtime.

Two processes on this CPU over Gloo, a stack of torch.nn.TransformerEncoderLayer
blocks split into two PipelineStages; five SGD steps with pipetwin's zb-h2
(which torch.distributed.pipelining does not ship) and five with PyTorch's
ScheduleGPipe, from the same weights and data: the losses agree to fp32.

    pip install .            # the pipetwin package, into a virtualenv with torch
    python examples/python/train_zb_h2.py
"""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

import pipetwin

K, M, STEPS, D, SEQ, BATCH = 2, 4, 5, 32, 8, 16


def halves():
    torch.manual_seed(0)
    blocks = [torch.nn.TransformerEncoderLayer(D, 4, 64, dropout=0.0, batch_first=True) for _ in range(4)]
    return torch.nn.Sequential(*blocks[:2]), torch.nn.Sequential(*blocks[2:])


def train(rank, name, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=K)
    module = halves()[rank]
    stage = PipelineStage(module, rank, K, torch.device("cpu"))
    loss_fn = lambda output, target: torch.nn.functional.mse_loss(output, target)  # noqa: E731
    if name == "gpipe":
        schedule = ScheduleGPipe(stage, M, loss_fn=loss_fn)
    else:
        program = pipetwin.Program.generate(name, ranks=K, microbatches=M)
        schedule = pipetwin.pytorch.runtime(program, [stage], loss_fn=loss_fn)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(BATCH, SEQ, D, generator=g), torch.randn(BATCH, SEQ, D, generator=g)
    for _ in range(STEPS):
        optimizer.zero_grad()
        losses = []
        schedule.step(x) if rank == 0 else schedule.step(target=y, losses=losses)
        optimizer.step()
        if rank == K - 1:
            with open(out, "a") as f:
                f.write(f"{torch.stack(losses).mean().item():.9f}\n")
    dist.destroy_process_group()


def run(name):
    out = f"/tmp/pipetwin-example-{os.getpid()}-{name}.txt"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(name, port, out), nprocs=K, join=True)
    with open(out) as f:
        losses = [float(line) for line in f]
    os.remove(out)
    return losses


if __name__ == "__main__":
    zb, gpipe = run("zb-h2"), run("gpipe")
    for step, (a, b) in enumerate(zip(zb, gpipe)):
        print(f"step {step}: loss zb-h2 {a:.7f}   ScheduleGPipe {b:.7f}   difference {a - b:+.1e}")
    worst = max(abs(a - b) / abs(b) for a, b in zip(zb, gpipe))
    print(f"largest relative difference {worst:.1e}: {'equal within fp32 tolerance' if worst < 1e-5 else 'DIFFERENT'}")
    raise SystemExit(0 if worst < 1e-5 else 1)
