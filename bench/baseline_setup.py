"""What the PyTorch baselines (ddp_baseline.py, tp_baseline.py,
pipelining_baseline.py) share: the Transformer pipetwin trains (same layer
kinds and shapes as exec/torch_layers.cpp), its loss, the command line of the
model's shape and the run, the batches every step draws, the timed step's
median (the warm-up left out as `pipetwin run` does), and starting one
process per rank over Gloo, rank 0 printing the median step in seconds.
Imported by the baselines, which run as scripts (bench/ on sys.path).
"""
import argparse
import math
import os
import sys

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plots"))
from stats import median  # noqa: E402

SHAPE = ("d-model", "d-ff", "heads", "seq-len", "vocab", "layers")
RUN = ("microbatches", "batch", "steps", "threads")


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


def parser(world: str, port: int) -> argparse.ArgumentParser:
    """The options every baseline takes: WORLD (ranks, replicas, members), the
    run's, the model's shape (all required integers) and --port."""
    p = argparse.ArgumentParser()
    for name in (world,) + RUN + SHAPE:
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--port", type=int, default=port)
    return p


def target_perm(a):
    """The fixed permutation of the vocabulary the model learns."""
    return torch.randperm(a.vocab, generator=torch.Generator().manual_seed(1))


def batch_of(step: int, a):
    """The token ids of step STEP (the same for every baseline and rank)."""
    return torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=torch.Generator().manual_seed(step + 2))


def median_step(times: list) -> float:
    """The median timed step, the warm-up left out as pipetwin run does."""
    return median(times[2 if len(times) >= 5 else 1:])


def init_rank(rank: int, a, port: int, world: int) -> None:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def launch(worker, a, world: int, what: str) -> None:
    """Starts WORKER(rank, a, port, queue) in WORLD processes and prints rank 0's median step."""
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, out)) for r in range(world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode != 0 for proc in procs):
        sys.exit(f"{what} baseline: a rank failed")
    print(f"{out.get():.9f}")
