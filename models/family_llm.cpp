// Decoder-only LLMs, GPT-style and Llama-style (family llm).
//
//   llm_embedding -> L x decoder_block -> llm_head
//
// Per sample, sequence s, hidden h, MLP width f, heads a, key/value heads g,
// kv = h·g/a (the width of K and of V), vocab V. FLOPs count 2 per
// multiply-add. A block's matrices hold
//   P = h·h (Q) + 2·h·kv (K, V) + h·h (output) + 3·h·f (SwiGLU: gate, up, down) or 2·h·f (GELU)
// weights, and
//   block  F = 2sP + 4s²h      (the projections, then QKᵀ and AV: s²h each, whatever g)
//          I = 2sP + 8s²h      (QKᵀ and AV have two activation operands)
//          W = 2sP             (the attention core has no weights)
// counting the full s² of the scores as Megatron and Narayanan et al. (SC'21)
// do: no halving for the causal mask, which flash attention's kernels only
// partly skip.
//   embedding F = sh with learned positions (their sum), else 0; W = sh (the
//             rows' gradient scattered into the table)
//   head   F = I = W = 2shV (the output matrix; tied or not, its gradient is computed)
//
// Parameters, as the Hugging Face implementations count them:
//   block      P, norms 2h (RMSNorm) or 4h (LayerNorm: weight and bias), and
//              biases: bias (GPT-2) on Q, K, V, output and both MLP matrices
//              (h + 2kv + h + f + h with GELU, 2f + h with SwiGLU),
//              attention_bias (Llama) h + 2kv + h, qkv_bias (Qwen2) h + 2kv
//   embedding  V·h, and a learned position table max_positions·h
//   head       the final norm h (or 2h), and V·h unless tied; no bias
// GPT-2 small (h 768, 12 layers, f 3072, V 50257, 1024 positions, tied) comes
// out at 124,439,808, as in Hugging Face.
//
// Stash per sample (flash attention always, so no s² score matrix): the
// per-layer terms of Korthikanti et al. 2022 (models/llm_memory.hpp), the
// elements kept whole and split under tensor parallelism together (no
// parallelism inside a layer here), plus 1-byte dropout masks:
//   block  bytes = s·(b·(4h + 2h + 2kv + 2f or 3f) + 2h with dropout)
//          elements = bytes / b (b bytes per element of the precision, rounded up)
// In 16-bit, for GPT (GELU, LayerNorm, g = a, f = 4h, dropout) that is the
// paper's 34·s·h bytes (17·s·h elements) per layer with flash attention.
//   embedding  its dropout mask, s·h bytes, when dropout
//   head       the final norm's input s·h, the output matrix's input s·h and
//              the cross-entropy's fp32 logits 4·s·V bytes (the paper's
//              Section 4.3: 4sh(1 + V/h) bytes in 16-bit)
// Output per sample: s·h after the embedding and after each block; the head's is the loss.
#include <string>

#include "models/families.hpp"
#include "models/llm_memory.hpp"

namespace pipetwin::models {
namespace {

std::int64_t norm_params(const LlmSpec& t) { return t.norm == LlmSpec::Norm::LayerNorm ? 2 * t.hidden : t.hidden; }

// Bytes as elements of the precision, rounded up.
std::int64_t as_elems(double bytes, Precision precision) {
  const double b = bytes_per_element(precision);
  return static_cast<std::int64_t>((bytes + b - 1) / b);
}

}  // namespace

std::int64_t llm_block_matrix_params(const LlmSpec& t) {
  const std::int64_t h = t.hidden, f = t.ffn_hidden;
  return 2 * h * h + 2 * h * t.kv() + (t.mlp == LlmSpec::Mlp::SwiGlu ? 3 : 2) * h * f;
}

std::int64_t llm_block_params(const LlmSpec& t) {
  const std::int64_t h = t.hidden, f = t.ffn_hidden, kv = t.kv();
  std::int64_t biases = 0;
  if (t.bias) {
    biases = h + 2 * kv + h + (t.mlp == LlmSpec::Mlp::SwiGlu ? 2 * f : f) + h;
  } else if (t.attention_bias) {
    biases = h + 2 * kv + h;
  } else if (t.qkv_bias) {
    biases = h + 2 * kv;
  }
  return llm_block_matrix_params(t) + biases + 2 * norm_params(t);
}

std::int64_t llm_embedding_params(const LlmSpec& t) {
  return t.vocab * t.hidden + (t.positions == LlmSpec::Positions::Learned ? t.positions_table() * t.hidden : 0);
}

std::int64_t llm_head_params(const LlmSpec& t) { return norm_params(t) + (t.tied_embeddings ? 0 : t.vocab * t.hidden); }

Model llm_model(const LlmSpec& t, Precision precision, std::string name) {
  const double s = static_cast<double>(t.seq_len), h = static_cast<double>(t.hidden), V = static_cast<double>(t.vocab);
  const double b = bytes_per_element(precision);
  Model m;
  m.name = std::move(name);
  m.family = "llm";
  m.precision = precision;
  m.input_elems = t.seq_len;  // token ids
  LayerShape shape;
  shape.seq_len = t.seq_len;
  shape.d_model = t.hidden;
  shape.d_ff = t.ffn_hidden;
  shape.heads = t.heads;
  shape.vocab = t.vocab;
  shape.kv_heads = t.kv_heads > 0 ? t.kv_heads : t.heads;
  shape.positions = t.positions == LlmSpec::Positions::Learned ? t.positions_table() : 0;
  shape.swiglu = t.mlp == LlmSpec::Mlp::SwiGlu;
  shape.rms_norm = t.norm == LlmSpec::Norm::RmsNorm;
  shape.tied = t.tied_embeddings;
  shape.qkv_bias = t.bias || t.attention_bias || t.qkv_bias;
  shape.out_bias = t.bias || t.attention_bias;
  shape.mlp_bias = t.bias;

  Layer emb{"embedding", LayerKind::LlmEmbedding, shape, {}, {}};
  emb.cost.forward_flops = t.positions == LlmSpec::Positions::Learned ? s * h : 0;
  emb.cost.weight_grad_flops = s * h;
  emb.cost.params = llm_embedding_params(t);
  emb.cost.stashed_elems = t.dropout ? as_elems(s * h, precision) : 0;
  emb.cost.output_elems = t.seq_len * t.hidden;
  // Vocabulary-parallel (Megatron-LM): one all-reduce of the output; its dropout mask stays whole.
  emb.cost.tensor_split = true;
  emb.cost.tp_forward_collectives = 1;
  emb.cost.tp_collective_elems = t.seq_len * t.hidden;
  emb.cost.tp_replicated_elems = emb.cost.stashed_elems;
  m.layers.push_back(emb);

  const double matrices = static_cast<double>(llm_block_matrix_params(t));
  const LlmLayerStash stash = llm_layer_stash(t);
  for (std::int64_t i = 0; i < t.layers; ++i) {
    Layer blk{"block" + std::to_string(i), LayerKind::DecoderBlock, shape, {}, {static_cast<int>(m.layers.size()) - 1}};
    blk.cost.forward_flops = 2 * s * matrices + 4 * s * s * h;
    blk.cost.input_grad_flops = 2 * s * matrices + 8 * s * s * h;
    blk.cost.weight_grad_flops = 2 * s * matrices;
    blk.cost.params = llm_block_params(t);
    blk.cost.stashed_elems = as_elems(s * (b * (stash.whole_elems + stash.split_elems) + stash.mask_bytes), precision);
    blk.cost.output_elems = t.seq_len * t.hidden;
    // Attention and MLP each column- then row-parallel: an all-reduce after
    // each in forward, one before each in backward; the norms' inputs and the
    // dropout masks stay whole on every device without sequence parallelism.
    blk.cost.tensor_split = true;
    blk.cost.tp_forward_collectives = 2;
    blk.cost.tp_backward_collectives = 2;
    blk.cost.tp_collective_elems = t.seq_len * t.hidden;
    blk.cost.tp_replicated_elems = as_elems(s * (b * stash.whole_elems + stash.mask_bytes), precision);
    m.layers.push_back(blk);
  }

  Layer head{"head", LayerKind::LlmHead, shape, {}, {static_cast<int>(m.layers.size()) - 1}};
  head.cost.forward_flops = 2 * s * h * V;
  head.cost.input_grad_flops = 2 * s * h * V;
  head.cost.weight_grad_flops = 2 * s * h * V;
  head.cost.params = llm_head_params(t);
  head.cost.stashed_elems = 2 * t.seq_len * t.hidden + as_elems(4 * s * V, precision);
  head.cost.output_elems = 1;  // the loss
  // Vocabulary-parallel projection and cross-entropy (their all-reduces of s
  // numbers left out); the input gradient all-reduced in backward; the final
  // norm's input and output stay whole without sequence parallelism.
  head.cost.tensor_split = true;
  head.cost.tp_backward_collectives = 1;
  head.cost.tp_collective_elems = t.seq_len * t.hidden;
  head.cost.tp_replicated_elems = 2 * t.seq_len * t.hidden;
  m.layers.push_back(head);
  return m;
}

}  // namespace pipetwin::models
