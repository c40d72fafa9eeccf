"""`--recompute op` against PyTorch's own selective checkpointing: a block
built as torchtitan's Llama builds it (RMSNorm, Q/K/V/output projections with
grouped-query attention and rotary positions, scaled_dot_product_attention,
SwiGLU's w1, w3, w2; no biases), wrapped in torch.utils.checkpoint with
torchtitan's op policy (_apply_op_sac: save the outputs of mm and of the fused
attention kernels, except every second mm), run forward under a dispatch mode
that records every operator the checkpoint sees and what the policy decides.
The bytes the policy saves, plus the block's input that the checkpoint keeps,
must equal what pipetwin predicts one block keeps under `--recompute op`:
the difference between two otherwise equal models, one block apart, in
`simulate --json`'s activations. Also checked: the operators it re-runs are
the products pipetwin counts (K, the output and w3), with their FLOPs.

On CPU the fused kernel is _scaled_dot_product_flash_attention_for_cpu, which
stands in here for the CUDA flash and efficient kernels of torchtitan's list.

    test_torch_op_sac.py PIPETWIN_BINARY
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
import warnings
from collections import defaultdict

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

PIPETWIN = sys.argv.pop(1) if len(sys.argv) > 1 else "build/cli/pipetwin"
SHAPE = dict(hidden=128, ffn_hidden=352, heads=4, kv_heads=2, seq_len=64)
SAVE = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


class Block(torch.nn.Module):
    def __init__(self, h, f, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, h // heads
        self.attention_norm, self.ffn_norm = torch.nn.RMSNorm(h), torch.nn.RMSNorm(h)
        kv = kv_heads * self.dim
        self.wq, self.wk = torch.nn.Linear(h, h, bias=False), torch.nn.Linear(h, kv, bias=False)
        self.wv, self.wo = torch.nn.Linear(h, kv, bias=False), torch.nn.Linear(h, h, bias=False)
        self.w1, self.w3 = torch.nn.Linear(h, f, bias=False), torch.nn.Linear(h, f, bias=False)
        self.w2 = torch.nn.Linear(f, h, bias=False)

    def rotary(self, x, freqs):
        x = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(x * freqs).flatten(3).type_as(x.real)

    def attention(self, x, freqs):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.dim)
        k = self.wk(x).view(b, s, self.kv_heads, self.dim)
        v = self.wv(x).view(b, s, self.kv_heads, self.dim)
        q, k = self.rotary(q, freqs), self.rotary(k, freqs)
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))

    def forward(self, x, freqs):
        h = x + self.attention(self.attention_norm(x), freqs)
        y = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Record(TorchDispatchMode):
    """Every operator's output bytes, in order, outside the checkpoint's own mode."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.ops.append((func, sum(t.numel() * t.element_size() for t in outs if isinstance(t, torch.Tensor)), args))
        return out


def torchtitan_policy(decisions):
    meta = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[mode + "_mm_count"] += 1
        save = func in SAVE and not (func == torch.ops.aten.mm.default and meta[mode + "_mm_count"] % 2 == 0)
        if not ctx.is_recompute:
            decisions.append((func, save))
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def torch_block_bytes():
    """What the op policy keeps of one block, per sample, and the re-run products' FLOPs."""
    s, h, a = SHAPE["seq_len"], SHAPE["hidden"], SHAPE["heads"]
    torch.manual_seed(0)
    block = Block(h, SHAPE["ffn_hidden"], a, SHAPE["kv_heads"])
    x = torch.randn(1, s, h, requires_grad=True)
    dim = h // a
    freqs = torch.polar(torch.ones(s, dim // 2), torch.outer(torch.arange(s).float(), torch.ones(dim // 2)))
    freqs = freqs.view(1, s, 1, dim // 2)
    decisions = []
    record = Record()
    with record:
        out = checkpoint(
            block, x, freqs, use_reentrant=False,
            context_fn=lambda: create_selective_checkpoint_contexts(torchtitan_policy(decisions)),
        )
    out.sum().backward()  # the recompute runs: the policy and the saved outputs agree with the forward's
    # The policy sees the operators in the recorded order; pair them up.
    seen = [(func, nbytes, args) for func, nbytes, args in record.ops if func in {d[0] for d in decisions}]
    saved = rerun_flops = 0
    products = []
    it = iter(seen)
    for func, save in decisions:
        rec = next(r for r in it if r[0] == func)
        if save:
            saved += rec[1]
        elif func == torch.ops.aten.mm.default:
            m, k = rec[2][0].shape
            n = rec[2][1].shape[1]
            rerun_flops += 2 * m * k * n
        if func == torch.ops.aten.mm.default:
            products.append(save)
    return saved + x.numel() * x.element_size(), rerun_flops, products


def pipetwin_block_bytes():
    """One block's activations under --recompute op: two models a block apart, K = 1, M = 1."""
    got = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in (2, 3):
            spec = os.path.join(tmp, f"m{layers}.yaml")
            with open(spec, "w") as f:
                f.write("family: llm\nname: tiny\nlayers: %d\nvocab: 1000\nmlp: swiglu\nnorm: rmsnorm\n"
                        "positions: rotary\ntied_embeddings: false\nprecision: fp32\n" % layers)
                f.write("".join(f"{k}: {v}\n" for k, v in SHAPE.items()))
            r = subprocess.run([PIPETWIN, "simulate", "--model", spec, "--hardware", "cpu", "-s", "gpipe", "-k", "1",
                                "-m", "1", "--recompute", "op", "--json"], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            got.append(json.loads(r.stdout))
    return got


class OpPolicy(unittest.TestCase):
    def test_saved_bytes_equal_pipetwins(self):
        saved, rerun_flops, products = torch_block_bytes()
        # Q, K, V, output, w1, w3, w2 in forward order: every other one saved.
        self.assertEqual(products, [True, False, True, False, True, False, True])
        s, h, f = SHAPE["seq_len"], SHAPE["hidden"], SHAPE["ffn_hidden"]
        kv = SHAPE["kv_heads"] * h // SHAPE["heads"]
        self.assertEqual(rerun_flops, 2 * s * h * (kv + h + f))
        two, three = pipetwin_block_bytes()
        ours = activations(three) - activations(two)
        self.assertTrue(math.isclose(ours, saved, rel_tol=1e-9), f"pipetwin {ours} B, PyTorch's policy {saved} B")


def activations(summary):
    return summary["summary"]["memory_per_stage"][0]["bytes"]["activations"]


if __name__ == "__main__":
    unittest.main()
