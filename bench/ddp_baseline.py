"""PyTorch's own data parallelism on the model `pipetwin run -k 1 -d D` trains,
for `python -m bench parallel`: DistributedDataParallel over Gloo, D processes,
the Transformer of bench/baseline_setup.py, each replica on batch / D in M
micro-batches (gradients accumulated under no_sync, reduced with the last
one's backward), Adam, same threads. Prints the median step time (seconds)
of rank 0.

  python bench/ddp_baseline.py --replicas 2 --microbatches 4 --batch 16 --steps 12 --threads 1 \
      --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4
"""

import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_setup import batch_of, init_rank, launch, layers, loss_fn, median_step, parser, target_perm  # noqa: E402


def worker(rank, a, port, out):
    init_rank(rank, a, port, a.replicas)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(*layers(a)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    perm = target_perm(a)
    share, mb = a.batch // a.replicas, a.batch // a.replicas // a.microbatches
    times = []
    dist.barrier()
    for step in range(a.steps):
        ids = batch_of(step, a)[rank * share:(rank + 1) * share]
        t0 = time.perf_counter()
        for i in range(a.microbatches):
            x = ids[i * mb:(i + 1) * mb]
            last = i + 1 == a.microbatches
            with contextlib.nullcontext() if last else model.no_sync():
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
    a = parser("replicas", 29711).parse_args()
    launch(worker, a, a.replicas, "ddp")


if __name__ == "__main__":
    main()
