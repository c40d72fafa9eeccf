// A Hugging Face config.json as an llm-family or moe-family model.
//
//   LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM:
//     hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//     num_key_value_heads (default: the heads), vocab_size,
//     max_position_embeddings, tie_word_embeddings (default false),
//     hidden_act (silu: the MLP is SwiGLU); RMSNorm, rotary positions, no
//     dropout kept (attention_dropout acts inside flash attention, which keeps
//     no mask); biases: Llama's attention_bias (Q, K, V and output), Qwen2's
//     Q, K and V always, Mistral none.
//   GPT2LMHeadModel:
//     n_embd, n_layer, n_head, n_positions, n_inner (null: 4·n_embd),
//     vocab_size, tie_word_embeddings (default true), activation_function
//     (gelu, gelu_new, ...); LayerNorm, learned positions, biases everywhere,
//     dropout when any of resid_pdrop, embd_pdrop, attn_pdrop (default 0.1)
//     is positive.
//   MixtralForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM (family
//   moe, the Llama-like fields above and):
//     Mixtral: num_local_experts, num_experts_per_tok (each expert's width
//       intermediate_size);
//     Qwen3-MoE: num_experts, num_experts_per_tok, moe_intermediate_size,
//       head_dim, per-head Q and K norms; decoder_sparse_step 1 and
//       mlp_only_layers [] only;
//     DeepSeek-V3: n_routed_experts, num_experts_per_tok,
//       moe_intermediate_size, n_shared_experts, first_k_dense_replace (dense
//       blocks of intermediate_size), moe_layer_freq 1 only, the latent
//       attention's kv_lora_rank, q_lora_rank (null: none),
//       qk_nope_head_dim, qk_rope_head_dim, v_head_dim; topk_method
//       noaux_tc's bias per expert; its multi-token prediction layers
//       (num_nextn_predict_layers) are not built.
//   The routing's imbalance and capacity factor (MoeSpec) from the optional
//   top-level keys pipetwin_imbalance and pipetwin_capacity_factor.
//
// The sequence length for the costs: the optional top-level key
// "pipetwin_seq_len" (at most the model's positions), else 2048 clipped to
// max_position_embeddings (n_positions): a config describes the model, not
// the training run, and a 128k-token window is rarely what one trains with.
// The precision: torch_dtype (bfloat16, float16, float32), bf16 without it.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "models/families.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {
namespace {

using nlohmann::json;

const std::vector<std::string> kArchitectures{"LlamaForCausalLM",   "MistralForCausalLM",  "Qwen2ForCausalLM",
                                              "GPT2LMHeadModel",    "MixtralForCausalLM",  "Qwen3MoeForCausalLM",
                                              "DeepseekV3ForCausalLM"};

class JsonFields {
 public:
  JsonFields(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(source_ + ": field '" + key + "': " + what);
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  std::int64_t positive_int(const std::string& key, std::int64_t max = 10'000'000) const {
    if (!has(key)) fail(key, "missing");
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail(key, "expected an integer, got " + v.dump());
    const auto x = v.get<std::int64_t>();
    if (x <= 0) fail(key, "must be positive, got " + std::to_string(x));
    if (x > max) fail(key, "must be at most " + std::to_string(max) + ", got " + std::to_string(x));
    return x;
  }
  std::int64_t positive_int_or(const std::string& key, std::int64_t fallback, std::int64_t max = 10'000'000) const {
    return has(key) ? positive_int(key, max) : fallback;
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, "expected true or false, got " + j_.at(key).dump());
    return j_.at(key).get<bool>();
  }
  std::int64_t non_negative_int(const std::string& key) const {
    const json& v = j_.at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) fail(key, "expected a non-negative integer, got " + v.dump());
    return v.get<std::int64_t>();
  }
  const json& json_at(const std::string& key) const { return j_.at(key); }
  double number_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number()) fail(key, "expected a number, got " + j_.at(key).dump());
    return j_.at(key).get<double>();
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail(key, "expected a string, got " + j_.at(key).dump());
    return j_.at(key).get<std::string>();
  }

 private:
  const json& j_;
  std::string source_;
};

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

bool looks_like_hf_config(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("architectures");
}

namespace {

// The bounds of the YAML spec (models/model_spec.cpp).
// Sequences up to 2^20 tokens: the long contexts context parallelism trains.
constexpr std::int64_t kLayers = 100'000, kWidth = 1'000'000, kSide = 1'048'576;

// The keys that name heads, hidden size and positions in the messages.
struct HfKeys {
  std::string heads, hidden, positions;
};

HfKeys read_gpt2(const JsonFields& y, LlmSpec& t) {
  t.hidden = y.positive_int("n_embd", kWidth);
  t.layers = y.positive_int("n_layer", kLayers);
  t.heads = y.positive_int("n_head", kWidth);
  t.max_positions = y.positive_int("n_positions", kSide);
  t.ffn_hidden = y.positive_int_or("n_inner", 4 * t.hidden, kWidth);
  t.vocab = y.positive_int("vocab_size");
  t.tied_embeddings = y.boolean_or("tie_word_embeddings", true);
  const std::string act = y.text_or("activation_function", "gelu_new");
  if (act.rfind("gelu", 0) != 0) y.fail("activation_function", "expected a GELU (gelu, gelu_new, ...), got '" + act + "'");
  t.mlp = LlmSpec::Mlp::Gelu;
  t.norm = LlmSpec::Norm::LayerNorm;
  t.positions = LlmSpec::Positions::Learned;
  t.bias = true;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) t.dropout = t.dropout || y.number_or(key, 0.1) > 0;
  return {"n_head", "n_embd", "n_positions"};
}

HfKeys read_llama_like(const JsonFields& y, const std::string& architecture, LlmSpec& t) {
  t.hidden = y.positive_int("hidden_size", kWidth);
  t.ffn_hidden = y.positive_int("intermediate_size", kWidth);
  t.layers = y.positive_int("num_hidden_layers", kLayers);
  t.heads = y.positive_int("num_attention_heads", kWidth);
  t.kv_heads = y.positive_int_or("num_key_value_heads", t.heads, kWidth);
  t.vocab = y.positive_int("vocab_size");
  t.max_positions = y.positive_int("max_position_embeddings", 100'000'000);
  t.tied_embeddings = y.boolean_or("tie_word_embeddings", false);
  const std::string act = y.text_or("hidden_act", "silu");
  if (act != "silu") y.fail("hidden_act", "expected silu (a SwiGLU MLP), got '" + act + "'");
  t.mlp = LlmSpec::Mlp::SwiGlu;
  t.norm = LlmSpec::Norm::RmsNorm;
  t.positions = LlmSpec::Positions::Rotary;
  t.attention_bias = (architecture == "LlamaForCausalLM" || architecture == "Qwen3MoeForCausalLM" ||
                      architecture == "DeepseekV3ForCausalLM") &&
                     y.boolean_or("attention_bias", false);
  if (t.attention_bias && architecture != "LlamaForCausalLM") {
    y.fail("attention_bias", "true is not modelled for " + architecture + " (its published configs have none)");
  }
  t.qkv_bias = architecture == "Qwen2ForCausalLM";
  if (t.kv_heads > t.heads || t.heads % t.kv_heads != 0) {
    y.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(t.heads) + "), got " +
                                      std::to_string(t.kv_heads));
  }
  return {"num_attention_heads", "hidden_size", "max_position_embeddings"};
}

// The mixtures of experts (family moe): the Llama-like fields, then each
// architecture's experts and attention. pipetwin_imbalance and
// pipetwin_capacity_factor (top level, optional) set MoeSpec's imbalance and
// capacity_factor, as pipetwin_seq_len sets the sequence.
void read_moe(const JsonFields& y, const std::string& architecture, HfConfig& c) {
  MoeSpec& m = c.moe;
  const std::int64_t ffn = c.spec.ffn_hidden;
  if (architecture == "MixtralForCausalLM") {
    m.experts = y.positive_int("num_local_experts", kLayers);
    m.expert_ffn_hidden = ffn;
  } else if (architecture == "Qwen3MoeForCausalLM") {
    m.experts = y.positive_int("num_experts", kLayers);
    m.expert_ffn_hidden = y.positive_int("moe_intermediate_size", kWidth);
    m.head_dim = y.positive_int_or("head_dim", c.spec.hidden / c.spec.heads, kWidth);
    m.qk_norm = true;
    if (y.positive_int_or("decoder_sparse_step", 1) != 1) y.fail("decoder_sparse_step", "only 1 (every block routed) is modelled");
    if (y.has("mlp_only_layers") && !(y.json_at("mlp_only_layers").is_array() && y.json_at("mlp_only_layers").empty())) {
      y.fail("mlp_only_layers", "only [] (every block routed) is modelled");
    }
  } else {  // DeepseekV3ForCausalLM
    m.experts = y.positive_int("n_routed_experts", kLayers);
    m.expert_ffn_hidden = y.positive_int("moe_intermediate_size", kWidth);
    m.shared_experts = y.has("n_shared_experts") ? y.positive_int("n_shared_experts", kWidth) : 0;
    m.dense_layers = y.has("first_k_dense_replace") ? y.non_negative_int("first_k_dense_replace") : 0;
    if (m.dense_layers > c.spec.layers) y.fail("first_k_dense_replace", "must be at most num_hidden_layers");
    if (y.positive_int_or("moe_layer_freq", 1) != 1) y.fail("moe_layer_freq", "only 1 (every block after the dense ones routed) is modelled");
    m.kv_lora_rank = y.positive_int("kv_lora_rank", kWidth);
    m.q_lora_rank = y.has("q_lora_rank") ? y.positive_int("q_lora_rank", kWidth) : 0;  // null: no query latent (V2-Lite)
    m.qk_nope_dim = y.positive_int("qk_nope_head_dim", kWidth);
    m.qk_rope_dim = y.positive_int("qk_rope_head_dim", kWidth);
    m.v_head_dim = y.positive_int("v_head_dim", kWidth);
    m.router_bias = y.text_or("topk_method", "noaux_tc") == "noaux_tc";
  }
  m.top_k = y.positive_int("num_experts_per_tok", kLayers);
  if (m.top_k > m.experts) y.fail("num_experts_per_tok", "must be at most the experts (" + std::to_string(m.experts) + ")");
  m.imbalance = y.number_or("pipetwin_imbalance", 1);
  if (!(m.imbalance >= 1)) y.fail("pipetwin_imbalance", "must be at least 1 (the busiest device over the mean)");
  m.capacity_factor = y.number_or("pipetwin_capacity_factor", 0);
  if (!(m.capacity_factor == 0 || m.capacity_factor >= 1)) {
    y.fail("pipetwin_capacity_factor", "must be 0 (dropless) or at least 1 (below, every expert drops tokens)");
  }
}

}  // namespace

Model hf_model(const HfConfig& c, std::string name) {
  if (c.moe.experts > 0) return moe_model(c.moe, c.precision, std::move(name));
  return llm_model(c.spec, c.precision, std::move(name));
}

HfConfig parse_hf_config(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object (a Hugging Face config.json)");
  const JsonFields y(j, source);
  if (!y.has("architectures")) y.fail("architectures", "missing (accepted: " + listed(kArchitectures) + ")");
  const json& archs = j.at("architectures");
  if (!archs.is_array() || archs.size() != 1 || !archs.front().is_string()) {
    y.fail("architectures", "expected a list of one name (accepted: " + listed(kArchitectures) + "), got " + archs.dump());
  }
  HfConfig c;
  c.architecture = archs.front().get<std::string>();
  if (std::find(kArchitectures.begin(), kArchitectures.end(), c.architecture) == kArchitectures.end()) {
    y.fail("architectures", "unknown architecture '" + c.architecture + "' (accepted: " + listed(kArchitectures) + ")");
  }

  LlmSpec& t = c.spec;
  const HfKeys keys = c.architecture == "GPT2LMHeadModel" ? read_gpt2(y, t) : read_llama_like(y, c.architecture, t);
  const std::string &heads_key = keys.heads, &hidden_key = keys.hidden, &positions_key = keys.positions;
  if (t.hidden % t.heads != 0) y.fail(heads_key, "must divide " + hidden_key + " (" + std::to_string(t.hidden) + ")");
  if (y.has("pipetwin_seq_len")) {
    t.seq_len = y.positive_int("pipetwin_seq_len", kSide);
    if (t.seq_len > t.max_positions) {
      y.fail("pipetwin_seq_len", "must be at most " + positions_key + " (" + std::to_string(t.max_positions) + "), got " +
                                     std::to_string(t.seq_len));
    }
  } else {
    t.seq_len = std::min<std::int64_t>(2048, t.max_positions);
  }
  // A rotary model has no position table: max_positions only bounds seq_len.
  if (t.positions == LlmSpec::Positions::Rotary) t.max_positions = 0;
  const bool moe = c.architecture == "MixtralForCausalLM" || c.architecture == "Qwen3MoeForCausalLM" ||
                   c.architecture == "DeepseekV3ForCausalLM";
  if (moe) {
    read_moe(y, c.architecture, c);
    c.moe.llm = t;
    if (const std::string why = moe_size_error(c.moe); !why.empty()) y.fail("num_hidden_layers", why);
  }
  const std::string dtype = y.text_or("torch_dtype", "bfloat16");
  if (dtype == "bfloat16") {
    c.precision = Precision::BF16;
  } else if (dtype == "float16") {
    c.precision = Precision::FP16;
  } else if (dtype == "float32") {
    c.precision = Precision::FP32;
  } else {
    y.fail("torch_dtype", "unknown dtype '" + dtype + "' (valid: bfloat16, float16, float32)");
  }
  return c;
}

}  // namespace pipetwin::models
