// The built-in model families and the YAML model spec that names one.
//
//   family: transformer   T(L, H, A) of GPipe: layers, d_ff, heads (+ d_model, seq_len, vocab)
//   family: mlp           input, hidden: [..], output
//   family: resnet        image, in_channels, stem_channels, stages: [..], classes
//   family: amoebanet     cells (N), filters (F), image, in_channels, classes
//   family: llm           decoder-only LLM, GPT- or Llama-style: layers, hidden, ffn_hidden, heads,
//                         kv_heads, seq_len, vocab, mlp, norm, positions, tied_embeddings, bias, ...
//   family: moe           mixture of experts: the llm fields (Llama style) + experts, top_k,
//                         expert_ffn_hidden, shared_experts, dense_layers, head_dim, qk_norm,
//                         the latent attention's ranks, capacity_factor, imbalance
//   a Hugging Face config.json (a path ending in .json): the llm or moe family, from its architecture
#pragma once

#include <string>

#include "models/model.hpp"
#include "models/yaml_file.hpp"

namespace pipetwin::models {

struct TransformerSpec {
  std::int64_t layers = 0, d_model = 0, d_ff = 0, heads = 0, seq_len = 0, vocab = 0;
};
struct MlpSpec {
  std::int64_t input = 0, output = 0;
  std::vector<std::int64_t> hidden;
};
struct ResNetSpec {
  std::int64_t image = 0, in_channels = 3, stem_channels = 0, classes = 0;
  std::vector<std::int64_t> stages;  // residual blocks per stage
};
struct AmoebaNetSpec {
  std::int64_t cells = 0, filters = 0, image = 0, in_channels = 3, classes = 0;
};

// A decoder-only LLM (models/family_llm.cpp). GPT-2 style: gelu, layernorm,
// learned positions, bias, tied, dropout; Llama style: swiglu, rmsnorm,
// rotary, no bias, untied, no dropout, kv_heads < heads (GQA).
struct LlmSpec {
  enum class Mlp { SwiGlu, Gelu };
  enum class Norm { RmsNorm, LayerNorm };
  enum class Positions { Rotary, Learned };
  std::int64_t layers = 0, hidden = 0, ffn_hidden = 0, heads = 0;
  std::int64_t kv_heads = 0;       // key/value heads (GQA); 0: as many as heads
  std::int64_t seq_len = 0;        // the training sequence, for the costs
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;  // rows of a learned position table; 0: seq_len
  Mlp mlp = Mlp::SwiGlu;
  Norm norm = Norm::RmsNorm;
  Positions positions = Positions::Rotary;
  bool tied_embeddings = false;  // the head reuses the token embedding
  bool bias = false;             // every linear has a bias (GPT-2), the head excepted
  bool attention_bias = false;   // q, k, v and output projections have biases (HF Llama's attention_bias)
  bool qkv_bias = false;         // q, k, v projections have biases (Qwen2)
  bool dropout = false;          // dropout after the embedding, attention and MLP (GPT); Llama has none
  // Flash attention (the default): no s x s score matrix is written, stashed
  // or read back. Off: the attention core materializes its scores, as
  // Megatron-LM's fused softmax kernels of 2021 did (Narayanan et al., SC'21).
  bool flash_attention = true;

  std::int64_t kv() const { return hidden / heads * (kv_heads > 0 ? kv_heads : heads); }  // width of K (and of V)
  std::int64_t positions_table() const { return max_positions > 0 ? max_positions : seq_len; }
};

// A mixture-of-experts decoder (family moe, models/family_moe.cpp): the llm
// family's Llama style (SwiGLU, RMSNorm, rotary, no bias, no dropout, flash
// attention) whose blocks after the first dense_layers replace their MLP by
// a router over `experts` SwiGLU experts of expert_ffn_hidden, top_k of them
// per token, beside shared_experts that every token takes. Attention is GQA
// (with a head_dim of its own, Qwen3's) or multi-head latent attention
// (DeepSeek-V2/V3: kv_lora_rank > 0, with q_lora_rank, the no-position and
// rotary parts of a query/key head, and a value head).
struct MoeSpec {
  LlmSpec llm;  // layers, hidden, ffn_hidden (the dense blocks' MLP), heads, kv_heads, seq_len, vocab, tied
  std::int64_t head_dim = 0;  // 0: hidden / heads
  bool qk_norm = false;       // an RMSNorm over each head's Q and K (Qwen3)
  std::int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  std::int64_t experts = 0, top_k = 0, expert_ffn_hidden = 0, shared_experts = 0, dense_layers = 0;
  bool router_bias = false;  // a bias per expert on the routing scores (DeepSeek-V3's e_score_correction_bias)
  // Tokens an expert takes at most, over its mean (Megatron-LM's
  // --moe-expert-capacity-factor; the rest dropped); 0: dropless.
  double capacity_factor = 0;
  // The busiest expert device's tokens over the mean: what an expert-parallel
  // group waits for (1: perfectly balanced routing).
  double imbalance = 1;

  bool latent() const { return kv_lora_rank > 0; }
  std::int64_t head() const { return head_dim > 0 ? head_dim : llm.hidden / llm.heads; }
  // The busiest device's expert work over the mean: the imbalance, capped by the capacity.
  double load() const { return capacity_factor > 0 && capacity_factor < imbalance ? capacity_factor : imbalance; }
};

// Parameters of a moe-family block (routed: the experts' MLP, else the dense
// one), and of the model's weights that one token's forward uses.
std::int64_t moe_block_params(const MoeSpec& spec, bool routed);
std::int64_t moe_active_params(const MoeSpec& spec);
// Its parameters counted in floating point, before any integer holds them:
// the specs refuse a mixture above kMoeMaxParams (every integer cost then
// stays exact; tests/models/test_spec_bounds.cpp builds one at the bound).
double moe_params_estimate(const MoeSpec& spec);
inline constexpr double kMoeMaxParams = 1e18;
// Why `spec` is refused for its size ("the model holds 1.02e+18 parameters,
// more than 10^18"), or empty.
std::string moe_size_error(const MoeSpec& spec);

Model transformer_model(const TransformerSpec& spec, Precision precision, std::string name);
Model mlp_model(const MlpSpec& spec, Precision precision, std::string name);
Model resnet_model(const ResNetSpec& spec, Precision precision, std::string name);
Model amoebanet_model(const AmoebaNetSpec& spec, Precision precision, std::string name);
Model llm_model(const LlmSpec& spec, Precision precision, std::string name);
Model moe_model(const MoeSpec& spec, Precision precision, std::string name);
// The llm family's embedding and head (family moe shares them), and the shape its layers carry.
LayerCost llm_embedding_cost(const LlmSpec& spec, Precision precision);
LayerCost llm_head_cost(const LlmSpec& spec, Precision precision);
LayerShape llm_layer_shape(const LlmSpec& spec);

// Parameters of the llm family, counted as the Hugging Face implementations
// count them (models/family_llm.cpp): per decoder block, the embedding
// (tokens and learned positions), and the head (final norm, and the output
// matrix unless tied).
std::int64_t llm_block_params(const LlmSpec& spec);
std::int64_t llm_embedding_params(const LlmSpec& spec);
std::int64_t llm_head_params(const LlmSpec& spec);
// Weights of a block's matrix multiplications (no biases, no norms): the
// FLOPs per token are 2 per weight.
std::int64_t llm_block_matrix_params(const LlmSpec& spec);

// A block's FP8 fields (LayerCost::fp8_*): per sample, its products with
// weights over `tokens` tokens and their `matrix_params`, and the elements
// per token of the operands FP8 casts (the products' inputs in forward,
// their output gradients in backward), `whole` of them on every device of
// a tensor group without sequence parallelism, `split` over it. Current
// scaling: an amax pass reads each element, a cast reads it again and
// writes it and its transpose in one byte each.
void set_fp8_costs(LayerCost& c, double tokens, std::int64_t matrix_params, Precision precision, double forward_whole,
                   double forward_split, double backward_whole, double backward_split);

// A Hugging Face config.json (models/hf_config.cpp): LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM or GPT2LMHeadModel (family llm);
// MixtralForCausalLM, Qwen3MoeForCausalLM or DeepseekV3ForCausalLM (family moe).
struct HfConfig {
  LlmSpec spec;
  // MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM: family
  // moe (moe.experts > 0; its llm is `spec`).
  MoeSpec moe;
  Precision precision = Precision::BF16;
  std::string architecture;
};
HfConfig parse_hf_config(const std::string& text, const std::string& source);
// The config's model: family moe where it has experts, else llm.
Model hf_model(const HfConfig& config, std::string name);
// True when `text` is a JSON object with an "architectures" field.
bool looks_like_hf_config(const std::string& text);

// Closed form of the Transformer's parameter count (for tests and docs):
//   embeddings V·d + s·d, per block 4d² + 2·d·d_ff + 9d + d_ff, head 2d + d·V + V.
std::int64_t transformer_params_closed_form(const TransformerSpec& spec);

Model model_from_yaml(const YamlFields& fields);
// A model spec's text: a Hugging Face config.json (named `name`: it names
// no model), or else the YAML spec.
Model model_from_text(const std::string& text, const std::string& source, const std::string& name);
// A path ending in .json is a Hugging Face config.json, any other a YAML spec.
Model load_model(const std::string& path);

}  // namespace pipetwin::models
