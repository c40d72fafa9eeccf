"""Published H100 runs side by side: torchtitan's FSDP, TP and Float8 (December 2024).

Each row of bench/torchtitan-h100.csv (a Llama 3.1 run of torchtitan's published
benchmark, Grand Teton H100 hosts) is a runs-CSV row for `pipetwin calibrate --runs`:
FSDP2 over its D GPUs is `--zero 3` (each block all-gathered before its forward
and backward, its gradients reduce-scattered), torchtitan's tensor parallelism is
`-t T --sequence-parallel`, its context parallelism `-c C` (ring attention, its
default), its selective activation checkpointing is the
per-operator policy (`--recompute op`) and its full checkpointing every block's
(`uniform:1`), and Float8 is `--precision fp8`. No gradient accumulation: one
micro-batch of the local batch a step (K = 1, M = 1).

The hardware is the dgx-h100 preset with the published host's memory (96 GB,
2.4 TB/s). The calibration's own method fits the matrix kernels' efficiency curve
and the elementwise kernels' share of the bandwidth on the single-host rows named
by --calibrate (default: Table 1's two, BF16 and Float8 on 8 GPUs; chosen before
any prediction was seen); the other rows are predicted on the fitted hardware.
Beside each figure: the predicted peak memory against the published reading
(GiB, the largest over the GPUs), and for each BF16 and Float8 pair the speed-up
FP8 gives, measured and predicted.
"""

from bench import published
from bench.common import ensure_build

HARDWARE = ("# The dgx-h100 preset with the published hosts' H100: 96 GB of HBM2e at 2.4 TB/s.\n"
            "name: grand-teton-h100\npreset: dgx-h100\ndevice:\n  memory_gb: 96\n  memory_bandwidth_gbps: 2400\n")


def add_arguments(ap):
    published.add_arguments(ap, "torchtitan-h100.csv", "torchtitan-h100", "8b-fsdp8-bf16,8b-fsdp8-fp8")


def run(a) -> dict:
    a.pipetwin = ensure_build()
    return published.run_benchmark(a, "grand-teton-h100", HARDWARE, published.llama_shapes())
