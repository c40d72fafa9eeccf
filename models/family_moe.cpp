// Mixture-of-experts decoders (family moe): Mixtral, Qwen3-MoE, DeepSeek-V3.
//
//   llm_embedding -> dense_layers x decoder_block -> the rest x moe_block -> llm_head
//
// The llm family's Llama style throughout (SwiGLU, RMSNorm, rotary, no bias,
// no dropout, flash attention); embedding and head are the llm family's.
// Per sample, sequence s, hidden h, heads a, FLOPs 2 per multiply-add.
//
// Attention, as widths per token: Q qw, K kw, V vw and the context cw that
// the output projection reads.
//   GQA   head d (head_dim, or h/a), g key/value heads: qw = cw = a·d,
//         kw = vw = g·d; weights h·qw + h·kw + h·vw + cw·h; Qwen3's norms
//         over each head's Q and K add 2d weights.
//   MLA   (DeepSeek-V2/V3) a query/key head of nope + rope, a value head v:
//         qw = kw = a·(nope + rope), vw = cw = a·v (keys and values expanded
//         from the latent, as the attention kernel reads them); weights
//         h·q_lora + q_lora·qw (or h·qw without a query latent), the
//         down projection h·(kv_lora + rope), the up projection
//         kv_lora·a·(nope + v), the output cw·h; the latents' norms q_lora
//         and kv_lora. Megatron-LM duplicates the down projections and their
//         norms on every device of a tensor group.
// The attention core: QKᵀ 2s²·a·(qw/a) and AV 2s²·cw FLOPs in forward,
// twice that in the input gradient (the full s², as family llm counts it).
//
// MLP: a dense block's SwiGLU of ffn_hidden f (3·h·f weights); a routed
// block's router h·E (+ E biases), E experts of fe (3·h·fe each) of which a
// token takes k, and shared experts of fs = shared·fe (3·h·fs). Per token the
// products run 2·(attention weights + 3·h·(k·fe + fs) + h·E) FLOPs in each
// of F, I and W; of them the routed experts' 2·3·h·k·fe are expert_flops.
// The router's stays in BF16 under FP8.
//
// Stash per token, 16-bit elements: the norms' inputs and outputs 4h (whole
// under tensor parallelism), Q, K, V and the context, MLA's latents (each
// with its normed copy) and rope key, and the MLP: a dense one's 3f (gate,
// up, product); a routed one's router logits in fp32 (2E), each of the k
// copies of a token dispatched and its expert's output (2h each) and its
// expert's 3fe (expert_stashed_elems: k·(2h + 3fe)), and the shared experts' 3fs.
// Elementwise traffic: family llm's norms, residuals, rotary (MLA's on its
// rope parts only) and SwiGLU over the activated width k·fe + fs, plus the
// permutation's and the combine's copies, (k + 1)·h each way, the router's
// softmax and top-k over E fp32 scores, and Qwen3's per-head norms.
//
// Parameters come out as Hugging Face counts them: Mixtral-8x7B 46,702,792,704,
// Qwen3-30B-A3B 30,532,122,624, DeepSeek-V3 671,026,419,200 (its multi-token
// prediction module left out, as the 671B leaves it; tests/models/test_moe.cpp).
#include <cstdio>
#include <string>

#include "models/families.hpp"

namespace pipetwin::models {
namespace {

// Widths per token and weights of one block's attention.
struct Attention {
  double qw = 0, kw = 0, vw = 0, cw = 0;
  double matrices = 0;    // the products' weights
  double norms = 0;       // its norms' weights beyond the block's two (Qwen3's per head, MLA's latents')
  double duplicated = 0;  // weights whole on every device of a tensor group (MLA's down projections and norms)
  double latent = 0;      // MLA: the latents' widths per token (q_lora + kv_lora)
  double rope = 0;        // widths rotary positions touch (Q and K)
};

Attention attention(const MoeSpec& t) {
  const double h = static_cast<double>(t.llm.hidden), a = static_cast<double>(t.llm.heads);
  Attention at;
  if (!t.latent()) {
    const double d = static_cast<double>(t.head()), g = static_cast<double>(t.llm.kv_heads > 0 ? t.llm.kv_heads : t.llm.heads);
    at.qw = at.cw = a * d;
    at.kw = at.vw = g * d;
    at.matrices = h * (at.qw + at.kw + at.vw) + at.cw * h;
    at.norms = t.qk_norm ? 2 * d : 0;
    at.duplicated = at.norms;
    at.rope = at.qw + at.kw;
    return at;
  }
  const double ql = static_cast<double>(t.q_lora_rank), kl = static_cast<double>(t.kv_lora_rank);
  const double nope = static_cast<double>(t.qk_nope_dim), rope = static_cast<double>(t.qk_rope_dim),
               v = static_cast<double>(t.v_head_dim);
  at.qw = at.kw = a * (nope + rope);
  at.vw = at.cw = a * v;
  const double q_down = ql > 0 ? h * ql : 0, kv_down = h * (kl + rope);
  at.matrices = (ql > 0 ? q_down + ql * at.qw : h * at.qw) + kv_down + kl * a * (nope + v) + at.cw * h;
  at.norms = ql + kl;
  at.duplicated = q_down + kv_down + at.norms;
  at.latent = ql + kl;
  at.rope = (a + 1) * rope;  // each query head's rope part, and the one shared key's
  return at;
}

double routed_matrices(const MoeSpec& t) {
  return 3.0 * static_cast<double>(t.llm.hidden) * static_cast<double>(t.expert_ffn_hidden) * static_cast<double>(t.experts);
}
double shared_width(const MoeSpec& t) { return static_cast<double>(t.shared_experts * t.expert_ffn_hidden); }
double router_params(const MoeSpec& t) {
  return static_cast<double>(t.llm.hidden * t.experts) + (t.router_bias ? static_cast<double>(t.experts) : 0);
}

// One block's weights, in floating point (block_cost's params, and the
// bound's estimate before any integer holds a count).
double block_params(const MoeSpec& t, const Attention& at, bool routed) {
  const double h = static_cast<double>(t.llm.hidden);
  const double mlp = routed ? routed_matrices(t) + 3 * h * shared_width(t) : 3 * h * static_cast<double>(t.llm.ffn_hidden);
  return at.matrices + mlp + at.norms + 2 * h + (routed ? router_params(t) : 0);
}

LayerCost block_cost(const MoeSpec& t, Precision precision, bool routed) {
  const double s = static_cast<double>(t.llm.seq_len), h = static_cast<double>(t.llm.hidden),
               b = bytes_per_element(precision);
  const Attention at = attention(t);
  const double k = routed ? static_cast<double>(t.top_k) : 0, fe = static_cast<double>(t.expert_ffn_hidden);
  const double E = routed ? static_cast<double>(t.experts) : 0;
  // The activated MLP width, and its products' weights per token.
  const double f_act = routed ? k * fe + shared_width(t) : static_cast<double>(t.llm.ffn_hidden);
  const double mlp_active = 3 * h * f_act, router = h * E;
  const double mlp_all = routed ? routed_matrices(t) + 3 * h * shared_width(t) : mlp_active;
  const double core = 2 * s * s * (at.qw + at.cw);  // QKᵀ and AV per sample
  LayerCost c;
  const double products = 2 * s * (at.matrices + mlp_active + router);
  c.forward_flops = products + core;
  c.input_grad_flops = products + 2 * core;
  c.weight_grad_flops = products;
  c.params = static_cast<std::int64_t>(block_params(t, at, routed));
  // Whole on every device of a tensor group: the block's two norms, MLA's
  // down projections and their norms, Qwen3's head norms, the router.
  c.tp_replicated_params = static_cast<std::int64_t>(2 * h + at.duplicated + (routed ? router_params(t) : 0));
  const double shared = routed ? shared_width(t) : 0;
  const double mlp_stash = routed ? 2 * E + k * (2 * h + 3 * fe) + 3 * shared : 3 * f_act;
  const double split = at.qw + at.kw + at.vw + at.cw + 2 * at.latent + (t.latent() ? static_cast<double>(t.qk_rope_dim) : 0) + mlp_stash;
  c.stashed_elems = as_elems(s * b * (4 * h + split), precision);
  c.output_elems = t.llm.seq_len * t.llm.hidden;
  c.tensor_split = true;
  c.tp_forward_collectives = 2;
  c.tp_backward_collectives = 2;
  c.tp_collective_elems = t.llm.seq_len * t.llm.hidden;
  c.tp_replicated_elems = as_elems(s * b * 4 * h, precision);
  // From I to W: each product's input and output gradient (family llm's,
  // with MLA's latents, and a routed MLP's dispatched copies and router).
  const double mlp_in = routed ? h + k * h : h, mlp_out = routed ? k * h + (shared > 0 ? h : 0) + E : h;
  const double latents_out = t.latent() ? at.latent + static_cast<double>(t.qk_rope_dim) : 0;
  c.weight_grad_elems = static_cast<std::int64_t>(
      s * (h + at.latent + at.cw + mlp_in + f_act + at.qw + at.kw + at.vw + latents_out + h + 2 * f_act + mlp_out));
  c.weight_grad_replicated_elems = 4 * t.llm.seq_len * t.llm.hidden;
  // Traffic per token: family llm's Llama-style terms (see family_llm.cpp).
  const double permute = routed ? 2 * (k + 1) * h * b + 3 * E * 4 : 0;  // the copies, and the router's fp32 scores
  const double latent_norms_fwd = 2 * at.latent * b, latent_norms_bwd = 3 * at.latent * b;
  const double head_norms = t.qk_norm ? (at.qw + at.kw) * b : 0;
  c.forward_traffic_replicated = s * (10 * h * b + latent_norms_fwd);
  c.backward_traffic_replicated = s * (12 * h * b + latent_norms_bwd);
  c.forward_traffic = c.forward_traffic_replicated + s * (3 * f_act * b + 2 * at.rope * b + permute + 2 * head_norms);
  c.backward_traffic = c.backward_traffic_replicated + s * (5 * f_act * b + 2 * at.rope * b + permute + 3 * head_norms);
  // Selective recompute re-runs the fused attention kernel's forward.
  c.selective_flops = core;
  // FP8: the products but the router's; casts of their inputs in forward (the
  // norms' outputs whole, the context, the dispatched copies and the down
  // projections' inputs split) and of their output gradients in backward.
  set_fp8_costs(c, s, static_cast<std::int64_t>(at.matrices + mlp_active), precision, 2 * h + at.latent,
                at.cw + k * h + f_act, 2 * h, at.qw + at.kw + at.vw + 2 * f_act + k * h);
  c.fp8_params = static_cast<std::int64_t>(at.matrices + mlp_all);
  c.cp_kv_elems = static_cast<std::int64_t>(s * (at.kw + at.vw));
  c.attention_seq = t.llm.seq_len;  // flash attention, causal
  c.attention_causal = true;
  if (routed) {
    c.expert_params = static_cast<std::int64_t>(routed_matrices(t));
    c.expert_flops = 2 * s * 3 * h * k * fe;
    c.expert_stashed_elems = as_elems(s * b * k * (2 * h + 3 * fe), precision);
    c.dispatch_elems = t.llm.seq_len * t.top_k * t.llm.hidden;
    c.expert_load = t.load();
  }
  return c;
}

}  // namespace

std::int64_t moe_block_params(const MoeSpec& t, bool routed) { return block_cost(t, Precision::BF16, routed).params; }

double moe_params_estimate(const MoeSpec& t) {
  const Attention at = attention(t);
  const double dense = static_cast<double>(t.dense_layers), routed = static_cast<double>(t.llm.layers - t.dense_layers);
  return block_params(t, at, false) * dense + block_params(t, at, true) * routed +
         static_cast<double>(llm_embedding_params(t.llm) + llm_head_params(t.llm));
}

std::string moe_size_error(const MoeSpec& t) {
  const double p = moe_params_estimate(t);
  if (p <= kMoeMaxParams) return {};
  char count[32];
  std::snprintf(count, sizeof count, "%.3g", p);
  return std::string("the model holds ") + count + " parameters, more than 10^18";
}

std::int64_t moe_active_params(const MoeSpec& t) {
  const Attention at = attention(t);
  const double h = static_cast<double>(t.llm.hidden);
  const double dense = at.matrices + at.norms + 2 * h + 3 * h * static_cast<double>(t.llm.ffn_hidden);
  const double routed = at.matrices + at.norms + 2 * h + router_params(t) +
                        3 * h * (static_cast<double>(t.top_k * t.expert_ffn_hidden) + shared_width(t));
  const std::int64_t blocks = t.llm.layers - t.dense_layers;
  return static_cast<std::int64_t>(dense * static_cast<double>(t.dense_layers) + routed * static_cast<double>(blocks)) +
         llm_embedding_params(t.llm) + llm_head_params(t.llm);
}

Model moe_model(const MoeSpec& t, Precision precision, std::string name) {
  Model m;
  m.name = std::move(name);
  m.family = "moe";
  m.precision = precision;
  m.input_elems = t.llm.seq_len;
  LayerShape shape = llm_layer_shape(t.llm);
  shape.head_dim = t.head_dim;
  shape.qk_norm = t.qk_norm;
  shape.latent_attention = t.latent();
  m.layers.push_back({"embedding", LayerKind::LlmEmbedding, shape, llm_embedding_cost(t.llm, precision), {}});
  const LayerCost dense = block_cost(t, precision, false), routed = block_cost(t, precision, true);
  LayerShape moe_shape = shape;
  moe_shape.experts = t.experts;
  moe_shape.top_k = t.top_k;
  moe_shape.expert_ffn = t.expert_ffn_hidden;
  moe_shape.shared_ffn = t.shared_experts * t.expert_ffn_hidden;
  moe_shape.router_bias = t.router_bias;
  moe_shape.capacity_factor = t.capacity_factor;
  for (std::int64_t i = 0; i < t.llm.layers; ++i) {
    const bool is_dense = i < t.dense_layers;
    m.layers.push_back({"block" + std::to_string(i), is_dense ? LayerKind::DecoderBlock : LayerKind::MoeBlock,
                        is_dense ? shape : moe_shape, is_dense ? dense : routed, {static_cast<int>(m.layers.size()) - 1}});
  }
  m.layers.push_back({"head", LayerKind::LlmHead, shape, llm_head_cost(t.llm, precision), {static_cast<int>(m.layers.size()) - 1}});
  return m;
}

}  // namespace pipetwin::models
