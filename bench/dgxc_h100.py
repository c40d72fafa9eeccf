"""Published H100 runs side by side: NVIDIA's DGX Cloud Llama 3.1 recipes (BF16 and FP8, CP, VP).

Each row of bench/dgxc-h100.csv is a Llama 3.1 training run NVIDIA publishes with its
DGX Cloud benchmark recipes (NeMo 24.09): Megatron-LM's tensor, pipeline (interleaved,
V = the recipe's VP), context and data parallelism, sequence parallelism with TP, the
distributed optimizer (`--zero 1`), no recompute, BF16 or FP8 (Transformer Engine,
`--precision fp8`), at 8 to 256 GPUs with the global batch growing with them. The
hardware is the dgx-h100 preset. `pipetwin calibrate --runs` fits the curve on the
single-node rows named by --calibrate (default: Llama 3.1 8B on 8 GPUs, BF16 and FP8;
chosen before any prediction was seen) and predicts the others. The source gives step
times, not memory. The 70B rows' figures at 512 to 2048 GPUs are in the source but not
here: each takes a SimGrid replay of minutes on this machine.
"""
from bench import published
from bench.common import ensure_build

HARDWARE = "# The dgx-h100 preset: DGX H100 nodes.\nname: dgx-h100-cloud\npreset: dgx-h100\n"


def add_arguments(ap):
    published.add_arguments(ap, "dgxc-h100.csv", "dgxc-h100", "8b-8-bf16,8b-8-fp8")


def run(a) -> dict:
    a.pipetwin = ensure_build()
    return published.run_benchmark(a, "dgx-h100-cloud", HARDWARE, published.llama_shapes())
