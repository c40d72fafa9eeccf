"""PyTorch's own pipeline runtime on the model `pipetwin run` trains, for
`python -m bench exec`: torch.distributed.pipelining (ScheduleGPipe or
Schedule1F1B) over Gloo, one process per rank, the Transformer of
bench/baseline_setup.py (same layer kinds, shapes and partition), micro-batches, batch, optimizer and
threads. Prints the median step time (seconds) of rank 0.

  python bench/pipelining_baseline.py --schedule 1f1b --ranks 2 --microbatches 4 --batch 16 \
      --steps 12 --threads 1 --partition 0:3,3:6 --d-model 128 --d-ff 512 --heads 4 --seq-len 64 --vocab 1000 --layers 4
"""

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baseline_setup import batch_of, init_rank, launch, layers, loss_fn, median_step, parser, target_perm  # noqa: E402


def worker(rank, a, port, out):
    init_rank(rank, a, port, a.ranks)
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
    perm = target_perm(a)
    times = []
    dist.barrier()
    for step in range(a.steps):
        ids = batch_of(step, a)
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
        out.put(median_step(times))
    dist.destroy_process_group()


def main():
    p = parser("ranks", 29611)
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], required=True)
    p.add_argument("--partition", required=True, help="begin:end layer ranges, one per rank")
    a = p.parse_args()
    launch(worker, a, a.ranks, "pipelining")


if __name__ == "__main__":
    main()
