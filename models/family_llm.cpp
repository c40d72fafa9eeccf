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
// Without flash attention (flash_attention: false) a block also stashes the
// attention core's 5·a·s² bytes (2·a·s² without dropout), split over T.
//
// Memory-bound traffic per token, in elements of the precision (e bytes) and
// 1-byte masks, read plus written by the elementwise kernels, as Megatron-LM's
// fused kernels do them (LayerCost::forward_traffic):
//   block forward   norms 2·2h, residual adds 2·3h (with dropout, fused
//                   bias-dropout-add: + its 1-byte mask h each), whole under T;
//                   split over T: the activation 2f (GELU) or 3f (SwiGLU),
//                   rotary 2(h + kv) on Q and K, and without flash attention
//                   the scores a·s: QKᵀ's write, the softmax's read and write,
//                   AV's read (4; with dropout its read and write, 6, and a
//                   1-byte mask)
//         backward  norms 2·3h and the residual gradients' sums 2·3h (with
//                   dropout + 2·(2h elements, h mask bytes)), whole; split:
//                   the activation 3f (GELU) or 5f (SwiGLU), rotary 2(h + kv),
//                   and without flash attention the scores a·s: dP's write, the
//                   softmax backward's two reads and a write, and the two
//                   reads of dS by QKᵀ's backward (6; with dropout 8 and a
//                   1-byte mask)
//   embedding       forward: the rows' write h, learned positions' sum 3h,
//                   dropout 2h + h mask bytes; backward: the scatter-add 3h,
//                   dropout 2h + h mask bytes; whole on every member of a
//                   tensor group (each writes the whole output before the
//                   all-reduce), split only by sequence parallelism
//   head            the final norm 2h forward, 3h backward, whole; the
//                   cross-entropy reads the V logits and writes them in fp32
//                   (e + 4 bytes each), and its backward reads those and writes
//                   the logits' gradient (4 + e), split over T (vocabulary)
// Output per sample: s·h after the embedding and after each block; the head's is the loss.
#include <string>

#include "models/families.hpp"
#include "models/llm_memory.hpp"

namespace pipetwin::models {
namespace {

std::int64_t norm_params(const LlmSpec& t) { return t.norm == LlmSpec::Norm::LayerNorm ? 2 * t.hidden : t.hidden; }

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

void set_fp8_costs(LayerCost& c, double tokens, std::int64_t matrix_params, Precision precision, double forward_whole,
                   double forward_split, double backward_whole, double backward_split) {
  const double cast = 2.0 * bytes_per_element(precision) + 2;  // per element
  c.fp8_flops = 2 * tokens * static_cast<double>(matrix_params);
  c.fp8_params = matrix_params;
  c.fp8_forward_traffic_replicated = tokens * forward_whole * cast;
  c.fp8_forward_traffic = tokens * (forward_whole + forward_split) * cast;
  c.fp8_backward_traffic_replicated = tokens * backward_whole * cast;
  c.fp8_backward_traffic = tokens * (backward_whole + backward_split) * cast;
}

LayerShape llm_layer_shape(const LlmSpec& t) {
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
  shape.flash_attention = t.flash_attention;
  return shape;
}

LayerCost llm_embedding_cost(const LlmSpec& t, Precision precision) {
  const double s = static_cast<double>(t.seq_len), h = static_cast<double>(t.hidden), b = bytes_per_element(precision);
  const bool learned = t.positions == LlmSpec::Positions::Learned;
  LayerCost c;
  c.forward_flops = learned ? s * h : 0;
  c.weight_grad_flops = s * h;
  c.params = llm_embedding_params(t);
  c.tp_replicated_params = learned ? t.positions_table() * t.hidden : 0;  // the table is not split
  c.stashed_elems = t.dropout ? as_elems(s * h, precision) : 0;
  c.output_elems = t.seq_len * t.hidden;
  // Vocabulary-parallel (Megatron-LM): one all-reduce of the output; its dropout mask stays whole.
  c.tensor_split = true;
  c.tp_forward_collectives = 1;
  c.tp_collective_elems = t.seq_len * t.hidden;
  c.tp_replicated_elems = c.stashed_elems;
  const double drop_traffic = t.dropout ? 2 * b + 1 : 0;  // per element: read, write, 1-byte mask
  c.forward_traffic = c.forward_traffic_replicated = s * h * (b + (learned ? 3 * b : 0) + drop_traffic);
  c.backward_traffic = c.backward_traffic_replicated = s * h * (3 * b + drop_traffic);
  return c;
}

namespace {

LayerCost block_cost(const LlmSpec& t, Precision precision) {
  const double s = static_cast<double>(t.seq_len), h = static_cast<double>(t.hidden), b = bytes_per_element(precision);
  const double f = static_cast<double>(t.ffn_hidden), kv = static_cast<double>(t.kv()), a = static_cast<double>(t.heads);
  const double matrices = static_cast<double>(llm_block_matrix_params(t));
  const LlmLayerStash stash = llm_layer_stash(t);
  // The scores' softmax output (and with dropout its 1-byte mask and output): bytes per sample.
  const double core = t.flash_attention ? 0 : s * s * static_cast<double>(t.heads) * (t.dropout ? 2 * b + 1 : b);
  LayerCost c;
  c.forward_flops = 2 * s * matrices + 4 * s * s * h;
  c.input_grad_flops = 2 * s * matrices + 8 * s * s * h;
  c.weight_grad_flops = 2 * s * matrices;
  c.params = llm_block_params(t);
  // Whole on every member of a tensor group: the norms and the biases added after the row-parallel matrices.
  c.tp_replicated_params = 2 * norm_params(t) + (t.bias || t.attention_bias ? t.hidden : 0) + (t.bias ? t.hidden : 0);
  c.stashed_elems = as_elems(s * (b * (stash.whole_elems + stash.split_elems) + stash.mask_bytes) + core, precision);
  c.output_elems = t.seq_len * t.hidden;
  // Attention and MLP each column- then row-parallel: an all-reduce after
  // each in forward, one before each in backward; the norms' inputs and the
  // dropout masks stay whole on every device without sequence parallelism.
  c.tensor_split = true;
  c.tp_forward_collectives = 2;
  c.tp_backward_collectives = 2;
  c.tp_collective_elems = t.seq_len * t.hidden;
  c.tp_replicated_elems = as_elems(s * (b * stash.whole_elems + stash.mask_bytes), precision);
  // From I to W: each linear's input and output gradient. Inputs: the two
  // norms' outputs (Q, K and V read one; gate and up the other), the
  // attention context, the down projection's input; output gradients: Q, K,
  // V, the attention output, the MLP's one or two up projections, the down
  // projection. The column-parallel inputs and the row-parallel output
  // gradients stay whole on every member of a tensor group.
  const std::int64_t up = t.mlp == LlmSpec::Mlp::Gelu ? 1 : 2;
  c.weight_grad_elems = t.seq_len * (6 * t.hidden + 2 * t.kv() + (1 + up) * t.ffn_hidden);
  c.weight_grad_replicated_elems = 4 * t.seq_len * t.hidden;
  // Materialized scores: the softmax's backward output and its scaled copy.
  c.backward_workspace_bytes = t.flash_attention ? 0 : 2 * a * s * s * b;
  // Traffic per token (see the header).
  const bool gelu = t.mlp == LlmSpec::Mlp::Gelu, rotary = t.positions == LlmSpec::Positions::Rotary;
  const double fwd_whole = 4 * h * b + 6 * h * b + (t.dropout ? 2 * h : 0);
  const double bwd_whole = 6 * h * b + 6 * h * b + (t.dropout ? 2 * (2 * h * b + h) : 0);
  const double scores_fwd = t.flash_attention ? 0 : a * s * (t.dropout ? 6 * b + 1 : 4 * b);
  const double scores_bwd = t.flash_attention ? 0 : a * s * (t.dropout ? 8 * b + 1 : 6 * b);
  const double rope = rotary ? 2 * (h + kv) * b : 0;
  c.forward_traffic_replicated = s * fwd_whole;
  c.backward_traffic_replicated = s * bwd_whole;
  c.forward_traffic = s * (fwd_whole + (gelu ? 2 : 3) * f * b + rope + scores_fwd);
  c.backward_traffic = s * (bwd_whole + (gelu ? 3 : 5) * f * b + rope + scores_bwd);
  // Selective recompute: the core's stash freed, its QKᵀ and AV and its
  // scores' traffic re-run in the backward (under flash attention the
  // fused kernel's forward again, with nothing freed).
  c.selective_elems = as_elems(core, precision);
  c.selective_flops = 4 * s * s * h;
  c.selective_traffic = s * scores_fwd;
  // torchtitan's op policy: the products in forward order are Q, K, V, the
  // output, then gate, up, down (SwiGLU) or up, down (GELU); the 1st, 3rd,
  // ... outputs are saved (Q, V, gate or up, and SwiGLU's down, whose output
  // before its reduction is whole on every device of a tensor group), with
  // the block's input and the fused attention kernel's output and fp32
  // log-sum-exp (a·s per sample). Without a fused kernel the core is
  // re-run with the rest. Recomputed: K, the output, and up (SwiGLU) or down.
  const std::int64_t S = t.seq_len, H = t.hidden;
  const std::int64_t core_out = t.flash_attention ? S * H + as_elems(4 * a * s, precision) : 0;
  c.op_saved_replicated_elems = S * H;
  c.op_saved_whole_elems = t.mlp == LlmSpec::Mlp::SwiGlu ? S * H : 0;
  c.op_saved_elems = c.op_saved_replicated_elems + S * H + S * t.kv() + core_out + S * t.ffn_hidden + c.op_saved_whole_elems;
  c.op_recompute_flops = 2 * s * h * (kv + h + f) + (t.flash_attention ? 0 : 4 * s * s * h);
  // FP8 casts: in forward the two norms' outputs (whole), the attention
  // context and the down projection's input; in backward the output
  // gradients of Q, K, V and of the up projections (split), of the attention
  // output and of the down projection (whole).
  set_fp8_costs(c, s, llm_block_matrix_params(t), precision, 2 * h, h + f, 2 * h,
                h + 2 * kv + static_cast<double>(up) * f);
  c.fp8_op_recompute_flops = 2 * s * h * (kv + h + f);
  c.cp_kv_elems = 2 * t.seq_len * t.kv();
  c.attention_seq = t.flash_attention ? t.seq_len : 0;
  c.attention_causal = true;
  return c;
}

}  // namespace

LayerCost llm_head_cost(const LlmSpec& t, Precision precision) {
  const double s = static_cast<double>(t.seq_len), h = static_cast<double>(t.hidden), V = static_cast<double>(t.vocab);
  const double b = bytes_per_element(precision);
  LayerCost c;
  c.forward_flops = 2 * s * h * V;
  c.input_grad_flops = 2 * s * h * V;
  c.weight_grad_flops = 2 * s * h * V;
  c.params = llm_head_params(t);
  c.tp_replicated_params = norm_params(t);  // the final norm
  c.stashed_elems = 2 * t.seq_len * t.hidden + as_elems(4 * s * V, precision);
  c.output_elems = 1;  // the loss
  c.weight_grad_elems = t.seq_len * (t.hidden + t.vocab);  // the normed input, the logits' gradient
  c.weight_grad_replicated_elems = t.seq_len * t.hidden;
  c.backward_workspace_bytes = 8 * s * V;  // fp32: the loss's gradient and log-softmax's
  // Vocabulary-parallel projection and cross-entropy (their all-reduces of s
  // numbers left out); the input gradient all-reduced in backward; the final
  // norm's input and output stay whole without sequence parallelism.
  c.tensor_split = true;
  c.tp_backward_collectives = 1;
  c.tp_collective_elems = t.seq_len * t.hidden;
  c.tp_replicated_elems = 2 * t.seq_len * t.hidden;
  c.forward_traffic_replicated = s * 2 * h * b;
  c.backward_traffic_replicated = s * 3 * h * b;
  c.forward_traffic = c.forward_traffic_replicated + s * V * (b + 4);
  c.backward_traffic = c.backward_traffic_replicated + s * V * (4 + b);
  return c;
}

Model llm_model(const LlmSpec& t, Precision precision, std::string name) {
  Model m;
  m.name = std::move(name);
  m.family = "llm";
  m.precision = precision;
  m.input_elems = t.seq_len;  // token ids
  const LayerShape shape = llm_layer_shape(t);
  m.layers.push_back({"embedding", LayerKind::LlmEmbedding, shape, llm_embedding_cost(t, precision), {}});
  const LayerCost block = block_cost(t, precision);
  for (std::int64_t i = 0; i < t.layers; ++i) {
    m.layers.push_back({"block" + std::to_string(i), LayerKind::DecoderBlock, shape, block,
                        {static_cast<int>(m.layers.size()) - 1}});
  }
  m.layers.push_back({"head", LayerKind::LlmHead, shape, llm_head_cost(t, precision), {static_cast<int>(m.layers.size()) - 1}});
  return m;
}

}  // namespace pipetwin::models
