"""PyTorch's own tensor parallelism on the model `pipetwin run -k 1 -t T` trains,
for `python -m bench parallel`: torch.distributed.tensor.parallel
(parallelize_module, ColwiseParallel / RowwiseParallel on a 1-D DeviceMesh)
over Gloo, T processes, the Transformer of bench/baseline_setup.py with
each block split Megatron-LM's way: q, k, v and the MLP's first linear
column-parallel, the attention output and the MLP's second linear
row-parallel. (The fused QKV of pipetwin's block is three linears here: a
column split of the fused matrix would cut across q, k and v.) The embedding
and the head are replicated; pipetwin splits them by vocabulary as well (one
more all-reduce each way). Same batch, micro-batches (gradients accumulated),
Adam and threads. Prints the median step time (seconds) of rank 0.

  python bench/tp_baseline.py --members 2 --microbatches 4 --batch 16 --steps 12 --threads 1 \
      --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4
"""

import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_setup import (Embedding, Head, batch_of, init_rank, launch, loss_fn, median_step,  # noqa: E402
                            parser, target_perm)


class Block(nn.Module):
    """Pipetwin's block (pre-norm attention and GELU MLP) with q, k, v apart; heads local to a member."""

    def __init__(self, d, f, heads):
        super().__init__()
        self.dh = d // heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.ff1, self.ff2 = nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.ln1(x)
        q, k, v = (m(h).view(b, n, -1, self.dh).transpose(1, 2) for m in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.dh))
        ctx = torch.matmul(torch.softmax(scores, -1), v).transpose(1, 2).reshape(b, n, -1)
        x = x + self.out(ctx)
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


def worker(rank, a, port, out):
    init_rank(rank, a, port, a.members)
    mesh = init_device_mesh("cpu", (a.members,))
    torch.manual_seed(0)
    blocks = [Block(a.d_model, a.d_ff, a.heads) for _ in range(a.layers)]
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "out": RowwiseParallel(),
            "ff1": ColwiseParallel(), "ff2": RowwiseParallel()}
    for blk in blocks:
        parallelize_module(blk, mesh, plan)
    model = nn.Sequential(Embedding(a.vocab, a.seq_len, a.d_model), *blocks, Head(a.d_model, a.vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    perm = target_perm(a)
    mb = a.batch // a.microbatches
    times = []
    dist.barrier()
    for step in range(a.steps):
        ids = batch_of(step, a)
        t0 = time.perf_counter()
        for i in range(a.microbatches):
            x = ids[i * mb:(i + 1) * mb]
            (loss_fn(model(x), perm[x]) / a.microbatches).backward()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            times.append(time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        out.put(median_step(times))
    dist.destroy_process_group()


def main():
    a = parser("members", 29811).parse_args()
    launch(worker, a, a.members, "tensor-parallel")


if __name__ == "__main__":
    main()
