// The llm family's layer kinds (llm_embedding, decoder_block, llm_head) as
// functional LibTorch code, for exec/torch_layers.cpp (internal to exec/).
//
//   llm_embedding  tokens -> table[tokens] (+ positions[0..s) when learned)
//   decoder_block  x + attn(norm1(x)), then + mlp(norm2(.))
//                  attn: q, k, v projections (k, v with kv_heads heads,
//                  repeated to the query heads: GQA), rotary embedding on the
//                  head dimension (base 10000) unless positions are learned,
//                  causal scaled-dot-product attention, output projection;
//                  mlp: down(silu(gate(x)) * up(x)) (SwiGLU) or
//                  proj(gelu_tanh(fc(x))) (GELU); norms RMSNorm or LayerNorm;
//                  biases where the LayerShape says (qkv_bias, out_bias,
//                  mlp_bias)
//   llm_head       final norm, projection to the vocabulary (no bias),
//                  cross-entropy mean
//
// Parameters, in this order, exactly those models/family_llm.cpp counts:
//   embedding  token table (vocab x h) [, position table (positions x h)]
//   block      norm1 w [b], q w [b], k w [b], v w [b], o w [b], norm2 w [b],
//              gate w [b], up w [b], down w [b]   (SwiGLU)
//              fc w [b], proj w [b]               (GELU)
//   head       norm w [b], output matrix (vocab x h)
//
// Family moe's blocks are these with an attention head of `head_dim` (the
// Q and output matrices a·head_dim wide) and, with `qk_norm`, an RMSNorm
// over each head's Q and K after their projections (weights after V's); a
// routed block (moe_block) has exec/torch_moe.hpp's MLP after norm2.
//
// Every matrix goes through exec's `linear`, so the I/W split defers their
// weight gradients. A tied head (tied_embeddings) is refused: the head and
// the embedding are separate layers, possibly on different stages, and the
// executor does not share a tensor between layers; models/ counts a tied
// head without the matrix, which the executor cannot honour.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "models/model.hpp"

namespace pipetwin::exec {

bool is_llm_kind(models::LayerKind kind);

// Parameters of an llm layer, drawn from `gen` (fp32, CPU). Throws
// pipetwin::Error for a tied head.
std::vector<at::Tensor> init_llm_layer(const models::Layer& layer, at::Generator& gen);

// Forward of an llm layer; `targets` for the head only (mean cross-entropy).
at::Tensor forward_llm_layer(const models::Layer& layer, const at::Tensor& input, const std::vector<at::Tensor>& params,
                             const at::Tensor& targets);

// For exec/torch_moe.cpp, reading `p` from `*next` on and advancing it: a
// decoder block's first half, x + attention(norm1(x)); a norm (norm2).
at::Tensor attention_half(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p,
                          std::size_t* next);
at::Tensor llm_norm(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p, std::size_t* next);
// down(silu(gate(x)) * up(x)), every product through `linear`.
at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down);

}  // namespace pipetwin::exec
