"""Profiles PyTorch's own pipeline schedules on a model pipetwin does not know,
one torch.profiler trace per rank, for `pipetwin calibrate`.

The model is a decoder-only stack of PyTorch's own
``torch.nn.TransformerEncoderLayer`` run with a causal mask (GPT's block:
masked self-attention, a feed-forward, layer norms), one layer per stage, four stages on two ranks over Gloo. Each configuration (a PyTorch
schedule class and a micro-batch count) runs its warm-up steps, then
``--steps`` profiled steps; its traces go to ``OUT/<name>[-rN]/rank<R>.json``.

    python examples/python/profile_torch_schedules.py OUT [--repeats 3] [--steps 4]

ScheduleGPipe (``gpipe-m4``) runs one stage per rank, two layers each: a
partition of its own, calibrated apart.
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed import pipelining as pp

STAGES, RANKS = 4, 2
SIZES = {"width": 256, "heads": 4, "ffn": 1024, "seq": 64, "batch": 32}

# name: (schedule class, micro-batches); the V-shaped class places stages 0 and 3 on rank 0
CONFIGS = {
    "interleaved1f1b-m4": ("ScheduleInterleaved1F1B", 4),
    "interleaved1f1b-m8": ("ScheduleInterleaved1F1B", 8),
    "interleavedzb-m4": ("ScheduleInterleavedZeroBubble", 4),
    "interleavedzb-m8": ("ScheduleInterleavedZeroBubble", 8),
    "loopedbfs-m4": ("ScheduleLoopedBFS", 4),
    "loopedbfs-m8": ("ScheduleLoopedBFS", 8),
    "zbv-m4": ("ScheduleZBVZeroBubble", 4),
    "zbv-m8": ("ScheduleZBVZeroBubble", 8),
    "gpipe-m4": ("ScheduleGPipe", 4),
}


class DecoderBlock(torch.nn.Module):
    """One ``nn.TransformerEncoderLayer`` with a causal mask: a decoder-only block."""

    def __init__(self, width, heads, ffn, seq):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(width, heads, ffn, dropout=0.0, batch_first=True)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, x):
        return self.layer(x, src_mask=self.mask, is_causal=True)


def stage_ids(schedule, rank):
    if schedule == "ScheduleZBVZeroBubble":
        return [rank, STAGES - 1 - rank]
    return [rank + RANKS * v for v in range(STAGES // RANKS)]


def loss_fn(output, target):
    return torch.nn.functional.mse_loss(output, target)


def worker(rank, port, out, schedule, microbatches, warmup, steps, sizes):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=RANKS)
    torch.manual_seed(0)
    w, seq, batch = sizes["width"], sizes["seq"], sizes["batch"]
    blocks = [DecoderBlock(w, sizes["heads"], sizes["ffn"], seq) for _ in range(STAGES)]
    if schedule == "ScheduleGPipe":  # one stage per rank
        per = STAGES // RANKS
        stages = [pp.PipelineStage(torch.nn.Sequential(*blocks[rank * per:(rank + 1) * per]), rank, RANKS,
                                   torch.device("cpu"))]
        sched = pp.ScheduleGPipe(stages[0], microbatches, loss_fn=loss_fn)
    else:
        stages = [pp.PipelineStage(blocks[s], s, STAGES, torch.device("cpu")) for s in stage_ids(schedule, rank)]
        sched = getattr(pp, schedule)(stages, microbatches, loss_fn=loss_fn)
    x, y = torch.randn(batch, seq, w), torch.randn(batch, seq, w)
    first = any(s.is_first for s in stages)

    def step():
        # The rank holding the first stage feeds it; every rank passes the target (the last stage's).
        if first:
            sched.step(x, target=y, losses=[])
        else:
            sched.step(target=y, losses=[])
        with torch.no_grad():
            for s in stages:
                for p in s.submod.parameters():
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-1e-3)
                        p.grad = None

    for _ in range(warmup):
        step()
    dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
            prof.step()
    os.makedirs(out, exist_ok=True)
    prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="which, comma-separated (default: all)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each configuration, interleaved")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    for name, value in SIZES.items():
        ap.add_argument(f"--{name}", type=int, default=value, help=f"the model's {name} (default {value})")
    a = ap.parse_args(argv)
    sizes = {name: getattr(a, name) for name in SIZES}
    names = [n for n in a.configs.split(",") if n]
    for n in names:
        if n not in CONFIGS:
            sys.exit(f"--configs: unknown configuration '{n}' (known: {', '.join(CONFIGS)})")
    for r in range(a.repeats):
        for n in names:
            schedule, m = CONFIGS[n]
            out = os.path.join(a.out, n if a.repeats == 1 else f"{n}-r{r}")
            mp.spawn(worker, args=(free_port(), out, schedule, m, a.warmup, a.steps, sizes), nprocs=RANKS, join=True)
            print(f"profiled {n} ({schedule}, M={m}) into {out}", flush=True)


if __name__ == "__main__":
    main()
