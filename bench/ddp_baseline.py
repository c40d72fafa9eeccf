"""PyTorch's own data parallelism on the model `pipetwin run -k 1 -d D` trains,
for scripts/bench_parallel.sh: DistributedDataParallel over Gloo, D processes,
the same Transformer as bench/pipelining_baseline.py (same layer kinds and
shapes), each replica on batch / D in M micro-batches (gradients accumulated
under no_sync, reduced with the last one's backward), Adam, same threads.
Prints the median step time (seconds) of rank 0.

  python bench/ddp_baseline.py --replicas 2 --microbatches 4 --batch 16 --steps 12 --threads 1 \
      --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipelining_baseline import layers, loss_fn  # noqa: E402  (the same model)


def worker(rank, a, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.replicas)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(*layers(a)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    perm = torch.randperm(a.vocab, generator=torch.Generator().manual_seed(1))
    share, mb = a.batch // a.replicas, a.batch // a.replicas // a.microbatches
    times = []
    dist.barrier()
    for step in range(a.steps):
        g = torch.Generator().manual_seed(step + 2)
        ids = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g)[rank * share:(rank + 1) * share]
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
        out.put(statistics.median(times[2 if len(times) >= 5 else 1:]))  # warm-up left out as pipetwin run does
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name in ("replicas", "microbatches", "batch", "steps", "threads", "d-model", "d-ff", "heads", "seq-len", "vocab",
                 "layers"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--port", type=int, default=29711)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, a, a.port, out)) for r in range(a.replicas)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    if any(proc.exitcode != 0 for proc in procs):
        sys.exit("ddp baseline: a rank failed")
    print(f"{out.get():.9f}")


if __name__ == "__main__":
    main()
