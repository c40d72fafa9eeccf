"""PyTorch's own pipeline runtime on the model `pipetwin run` trains, for
scripts/bench_exec.sh: torch.distributed.pipelining (ScheduleGPipe or
Schedule1F1B) over Gloo, one process per rank, the same Transformer (same
layer kinds, shapes and partition), micro-batches, batch, optimizer and
threads. Prints the median step time (seconds) of rank 0.

  python bench/pipelining_baseline.py --schedule 1f1b --ranks 2 --microbatches 4 --batch 16 \
      --steps 12 --threads 1 --partition 0:3,3:6 --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4
"""

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe


class Embedding(nn.Module):
    def __init__(self, vocab, seq, d):
        super().__init__()
        self.tok = nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)

    def forward(self, ids):
        return F.embedding(ids, self.tok) + self.pos


class Block(nn.Module):
    """Pre-norm self-attention and feed-forward, as exec/torch_layers.cpp."""

    def __init__(self, d, f, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x):
        b, n, d = x.shape
        a = self.heads
        qkv = self.qkv(self.ln1(x)).view(b, n, 3, a, d // a).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(qkv[0], qkv[1].transpose(-2, -1)) * (1.0 / math.sqrt(d // a))
        ctx = torch.matmul(torch.softmax(scores, -1), qkv[2]).transpose(1, 2).reshape(b, n, d)
        x = x + self.out(ctx)
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, d, vocab):
        super().__init__()
        self.ln, self.proj = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, x):
        return self.proj(self.ln(x))


def layers(a):
    return [Embedding(a.vocab, a.seq_len, a.d_model)] + [Block(a.d_model, a.d_ff, a.heads) for _ in range(a.layers)] + [
        Head(a.d_model, a.vocab)]


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def worker(rank, a, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    ranges = [tuple(int(x) for x in r.split(":")) for r in a.partition.split(",")]
    torch.manual_seed(0)
    all_layers = layers(a)
    begin, end = ranges[rank]
    module = nn.Sequential(*all_layers[begin:end])
    mb = a.batch // a.microbatches
    example = (torch.randint(0, a.vocab, (mb, a.seq_len)) if rank == 0 else torch.randn(mb, a.seq_len, a.d_model),)
    stage = PipelineStage(module, rank, a.ranks, torch.device("cpu"), input_args=example)
    kind = ScheduleGPipe if a.schedule == "gpipe" else Schedule1F1B
    schedule = kind(stage, n_microbatches=a.microbatches, loss_fn=loss_fn)
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    perm = torch.randperm(a.vocab, generator=torch.Generator().manual_seed(1))
    times = []
    dist.barrier()
    for step in range(a.steps):
        g = torch.Generator().manual_seed(step + 2)
        ids = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g)
        t0 = time.perf_counter()
        if rank == 0:
            schedule.step(ids)
        elif rank == a.ranks - 1:
            schedule.step(target=perm[ids])
        else:
            schedule.step()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        out.put(statistics.median(times[2 if len(times) >= 5 else 1:]))  # warm-up left out as pipetwin run does
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], required=True)
    for name in ("ranks", "microbatches", "batch", "steps", "threads", "d-model", "d-ff", "heads", "seq-len", "vocab",
                 "layers"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--partition", required=True, help="begin:end layer ranges, one per rank")
    p.add_argument("--port", type=int, default=29611)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, out)) for r in range(a.ranks)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode != 0 for proc in procs):
        sys.exit("pipelining baseline: a rank failed")
    print(f"{out.get():.9f}")


if __name__ == "__main__":
    main()
