"""Published H100 runs side by side: NVIDIA Megatron-Bridge's dense and mixture-of-experts
pre-training (Llama 3, Qwen3-30B-A3B, Qwen3-235B-A22B, FP8).

Each row of bench/mbridge-h100.csv is a run of Megatron-Bridge's published performance
summary on DGX-H100 (releases 25.11 and 26.04): Megatron-LM's tensor (with sequence
parallelism), pipeline (interleaved, V = the table's VP), expert (`-e E`, the experts
whole on each device: ETP 1, `--expert-tensor 1`) and data parallelism with the
distributed optimizer (`--zero 1`; Llama 3 8B's Megatron FSDP `--zero 3`), FP8 current
scaling (`--precision fp8`). The hardware is the dgx-h100 preset. `pipetwin calibrate
--runs` fits the curve on the single-node row named by --calibrate (default: Llama 3 8B
on 8 GPUs, the only single-node row; chosen before any prediction was seen) and predicts
the others, the mixtures of experts among them. The source gives throughput, not memory.
Not in the table: its 405B rows (1,024 GPUs: a SimGrid replay of minutes each) and its
DeepSeek-V3 row (25.09, whose precision the page does not state).
"""
import json
import os

from bench import published
from bench.common import ensure_build

HARDWARE = "# The dgx-h100 preset: DGX H100 nodes.\nname: dgx-h100-mbridge\npreset: dgx-h100\n"


def shapes():
    """Llama 3 8B and 70B; Qwen3-30B-A3B (examples/qwen3-30b-a3b.json) and Qwen3-235B-A22B."""
    llama = published.llama_shapes()
    with open(os.path.join(published.ROOT, "examples", "qwen3-30b-a3b.json")) as f:
        qwen = json.load(f)
    return {"llama3-8b": llama["8b"], "llama3-70b": llama["70b"], "qwen3-30b-a3b": qwen,
            "qwen3-235b-a22b": dict(qwen, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536,
                                    num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4)}


def add_arguments(ap):
    published.add_arguments(ap, "mbridge-h100.csv", "mbridge-h100", "llama3-8b-8-fp8")


def run(a) -> dict:
    a.pipetwin = ensure_build()
    return published.run_benchmark(a, "dgx-h100-mbridge", HARDWARE, shapes())
