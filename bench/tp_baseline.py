"""PyTorch's own tensor parallelism on the model `pipetwin run -k 1 -t T` trains,
for scripts/bench_parallel.sh: torch.distributed.tensor.parallel
(parallelize_module, ColwiseParallel / RowwiseParallel on a 1-D DeviceMesh)
over Gloo, T processes, the Transformer of bench/pipelining_baseline.py with
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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelining_baseline import Embedding, Head, loss_fn  # noqa: E402  (the same model)


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
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.members)
    mesh = init_device_mesh("cpu", (a.members,))
    torch.manual_seed(0)
    blocks = [Block(a.d_model, a.d_ff, a.heads) for _ in range(a.layers)]
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "out": RowwiseParallel(),
            "ff1": ColwiseParallel(), "ff2": RowwiseParallel()}
    for blk in blocks:
        parallelize_module(blk, mesh, plan)
    model = nn.Sequential(Embedding(a.vocab, a.seq_len, a.d_model), *blocks, Head(a.d_model, a.vocab))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    perm = torch.randperm(a.vocab, generator=torch.Generator().manual_seed(1))
    mb = a.batch // a.microbatches
    times = []
    dist.barrier()
    for step in range(a.steps):
        g = torch.Generator().manual_seed(step + 2)
        ids = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g)
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
        out.put(statistics.median(times[2 if len(times) >= 5 else 1:]))  # warm-up left out as pipetwin run does
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name in ("members", "microbatches", "batch", "steps", "threads", "d-model", "d-ff", "heads", "seq-len", "vocab",
                 "layers"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--port", type=int, default=29811)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, out)) for r in range(a.members)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode != 0 for proc in procs):
        sys.exit("tensor-parallel baseline: a rank failed")
    print(f"{out.get():.9f}")


if __name__ == "__main__":
    main()
