// The YAML model spec: `family` picks a builder, the other fields its sizes;
// or a Hugging Face config.json (models/hf_config.cpp).
#include <cmath>
#include <filesystem>
#include <string>

#include "models/families.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pipetwin::models {

namespace {

Precision precision_field(const YamlFields& y, const std::string& key) {
  try {
    return parse_precision(y.text(key));
  } catch (const Error& e) {
    y.fail(key, e.what());
  }
}

// The bounds below (model_from_yaml's comment says why).
// An llm's sequence up to 2^20 tokens (the long contexts context parallelism
// trains): its materialized scores, s² x heads x 5 bytes at most, stay under
// 2^63 (tests/models/test_spec_bounds.cpp builds that model).
constexpr std::int64_t kLlmLayers = 100'000, kLlmWidth = 1'000'000, kLlmSide = 1'048'576;

// The sizes families llm and moe share: layers, hidden, heads, kv_heads, seq_len, vocab.
void read_llm_sizes(const YamlFields& y, LlmSpec& t) {
  t.layers = y.positive_int("layers", kLlmLayers);
  t.hidden = y.positive_int("hidden", kLlmWidth);
  t.heads = y.positive_int("heads", kLlmWidth);
  t.kv_heads = y.positive_int_or("kv_heads", t.heads, kLlmWidth);
  t.seq_len = y.positive_int("seq_len", kLlmSide);
  t.vocab = y.positive_int("vocab");
}

template <class Known>
Model llm_from_yaml(const YamlFields& y, Precision precision, const std::string& name, const Known& known) {
  constexpr std::int64_t kWidth = kLlmWidth, kSide = kLlmSide;
  known({"layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab", "max_positions", "mlp", "norm",
         "positions", "tied_embeddings", "bias", "attention_bias", "qkv_bias", "dropout", "flash_attention"});
  LlmSpec t;
  read_llm_sizes(y, t);
  t.ffn_hidden = y.positive_int("ffn_hidden", kWidth);
  t.mlp = y.choice_or("mlp", {"swiglu", "gelu"}) == "gelu" ? LlmSpec::Mlp::Gelu : LlmSpec::Mlp::SwiGlu;
  t.norm = y.choice_or("norm", {"rmsnorm", "layernorm"}) == "layernorm" ? LlmSpec::Norm::LayerNorm : LlmSpec::Norm::RmsNorm;
  t.positions = y.choice_or("positions", {"rotary", "learned"}) == "learned" ? LlmSpec::Positions::Learned
                                                                              : LlmSpec::Positions::Rotary;
  t.tied_embeddings = y.boolean_or("tied_embeddings", false);
  t.bias = y.boolean_or("bias", false);
  t.attention_bias = y.boolean_or("attention_bias", false);
  t.qkv_bias = y.boolean_or("qkv_bias", false);
  t.dropout = y.boolean_or("dropout", false);
  t.flash_attention = y.boolean_or("flash_attention", true);
  if (t.hidden % t.heads != 0) y.fail("heads", "must divide hidden (" + std::to_string(t.hidden) + ")");
  if (t.kv_heads > t.heads || t.heads % t.kv_heads != 0) {
    y.fail("kv_heads", "must divide heads (" + std::to_string(t.heads) + "), got " + std::to_string(t.kv_heads));
  }
  if (y.has("max_positions")) {
    if (t.positions != LlmSpec::Positions::Learned) y.fail("max_positions", "only a learned position table has rows");
    t.max_positions = y.positive_int("max_positions", kSide);
    if (t.max_positions < t.seq_len) {
      y.fail("max_positions", "must be at least seq_len (" + std::to_string(t.seq_len) + "), got " +
                                  std::to_string(t.max_positions));
    }
  }
  return llm_model(t, precision, name);
}

// family moe: the llm family's Llama style (SwiGLU, RMSNorm, rotary, no
// bias, no dropout, flash attention) and the experts (MoeSpec).
template <class Known>
Model moe_from_yaml(const YamlFields& y, Precision precision, const std::string& name, const Known& known) {
  constexpr std::int64_t kLayers = kLlmLayers, kWidth = kLlmWidth;
  known({"layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab", "tied_embeddings", "head_dim",
         "qk_norm", "q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim", "experts", "top_k",
         "expert_ffn_hidden", "shared_experts", "dense_layers", "router_bias", "capacity_factor", "imbalance"});
  MoeSpec m;
  LlmSpec& t = m.llm;
  read_llm_sizes(y, t);
  t.tied_embeddings = y.boolean_or("tied_embeddings", false);
  m.experts = y.positive_int("experts", kLlmLayers);
  m.top_k = y.positive_int("top_k", kLlmLayers);
  if (m.top_k > m.experts) y.fail("top_k", "must be at most experts (" + std::to_string(m.experts) + ")");
  m.expert_ffn_hidden = y.positive_int("expert_ffn_hidden", kWidth);
  m.shared_experts = y.has("shared_experts") ? y.positive_int("shared_experts", kWidth) : 0;
  m.dense_layers = y.has("dense_layers") ? y.positive_int("dense_layers", kLayers) : 0;
  if (m.dense_layers > t.layers) y.fail("dense_layers", "must be at most layers (" + std::to_string(t.layers) + ")");
  if (m.dense_layers > 0 && !y.has("ffn_hidden")) y.fail("ffn_hidden", "missing: the dense layers' MLP width");
  t.ffn_hidden = y.positive_int_or("ffn_hidden", m.expert_ffn_hidden, kWidth);
  m.head_dim = y.positive_int_or("head_dim", 0, kWidth);
  m.qk_norm = y.boolean_or("qk_norm", false);
  m.router_bias = y.boolean_or("router_bias", false);
  if (y.has("kv_lora_rank")) {  // multi-head latent attention
    m.kv_lora_rank = y.positive_int("kv_lora_rank", kWidth);
    m.q_lora_rank = y.positive_int_or("q_lora_rank", 0, kWidth);
    m.qk_nope_dim = y.positive_int("qk_nope_dim", kWidth);
    m.qk_rope_dim = y.positive_int("qk_rope_dim", kWidth);
    m.v_head_dim = y.positive_int("v_head_dim", kWidth);
    for (const char* key : {"head_dim", "qk_norm", "kv_heads"}) {
      if (y.has(key)) y.fail(key, "not with kv_lora_rank (latent attention has its own head sizes)");
    }
  } else {
    for (const char* key : {"q_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim"}) {
      if (y.has(key)) y.fail(key, "needs kv_lora_rank (it sizes the latent attention)");
    }
  }
  if (m.head_dim == 0 && t.hidden % t.heads != 0) y.fail("heads", "must divide hidden (" + std::to_string(t.hidden) + "), or give head_dim");
  if (t.kv_heads > t.heads || t.heads % t.kv_heads != 0) {
    y.fail("kv_heads", "must divide heads (" + std::to_string(t.heads) + "), got " + std::to_string(t.kv_heads));
  }
  m.capacity_factor = y.number_or("capacity_factor", 0);
  if (!(m.capacity_factor == 0 || m.capacity_factor >= 1)) {
    y.fail("capacity_factor", "must be 0 (dropless) or at least 1 (below, every expert drops tokens)");
  }
  m.imbalance = y.number_or("imbalance", 1);
  if (!(m.imbalance >= 1)) y.fail("imbalance", "must be at least 1 (the busiest device's tokens over the mean)");
  if (const std::string why = moe_size_error(m); !why.empty()) y.fail("experts", why);
  return moe_model(m, precision, name);
}

}  // namespace

namespace {

Model model_of_family(const YamlFields& y) {
  const std::string family = y.text("family");
  const std::string name = y.has("name") ? y.line("name") : family;
  // An LLM trains in 16-bit; the other families default to fp32.
  const Precision precision =
      y.has("precision") ? precision_field(y, "precision") : family == "llm" || family == "moe" ? Precision::BF16 : Precision::FP32;
  const std::vector<std::string> common{"family", "name", "precision", "grad_precision"};
  const auto known = [&](std::vector<std::string> fields) {
    fields.insert(fields.end(), common.begin(), common.end());
    y.reject_unknown(fields);
  };
  // Bounds far above any real model, chosen so that no integer cost overflows:
  // at most 10^5 layers (blocks, cells), 10^6 channels or features in the
  // widest layer, 10^5 pixels a side or tokens a sequence, 10^7 classes or
  // words. The largest model they allow holds under 2·10^18 parameters
  // (tests/models/test_hardware.cpp builds it under UBSan).
  constexpr std::int64_t kLayers = 100'000, kWidth = 1'000'000, kSide = 100'000;
  if (family == "transformer") {
    known({"layers", "d_model", "d_ff", "heads", "seq_len", "vocab"});
    TransformerSpec t{y.positive_int("layers", kLayers), y.positive_int("d_model", kWidth), y.positive_int("d_ff", kWidth),
                      y.positive_int("heads", kWidth),   y.positive_int("seq_len", kSide),  y.positive_int("vocab")};
    if (t.d_model % t.heads != 0) y.fail("heads", "must divide d_model (" + std::to_string(t.d_model) + ")");
    return transformer_model(t, precision, name);
  }
  if (family == "mlp") {
    known({"input", "hidden", "output"});
    return mlp_model({y.positive_int("input", kWidth), y.positive_int("output", kWidth),
                      y.positive_int_list("hidden", kLayers, kWidth)},
                     precision, name);
  }
  if (family == "resnet") {
    known({"image", "in_channels", "stem_channels", "stages", "classes"});
    const auto stages = y.positive_int_list("stages", 64, kLayers);
    std::int64_t blocks = 0;
    for (const auto b : stages) blocks += b;
    if (blocks > kLayers) y.fail("stages", "hold " + std::to_string(blocks) + " residual blocks, at most " + std::to_string(kLayers));
    const auto stem = y.positive_int("stem_channels", kWidth);
    // Each stage after the first doubles the channels.
    if (static_cast<double>(stem) * std::ldexp(1.0, static_cast<int>(stages.size()) - 1) > kWidth) {
      y.fail("stages", std::to_string(stages.size()) + " stages double the stem's " + std::to_string(stem) +
                           " channels past " + std::to_string(kWidth));
    }
    return resnet_model({y.positive_int("image", kSide), y.positive_int_or("in_channels", 3, kWidth), stem,
                         y.positive_int("classes"), stages},
                        precision, name);
  }
  if (family == "amoebanet") {
    known({"cells", "filters", "image", "in_channels", "classes"});
    const auto cells = y.positive_int("cells", kLayers / 10);  // a cell is ten layers
    if (cells % 3 != 0) y.fail("cells", "must be a multiple of 3 (three groups of normal cells), got " + std::to_string(cells));
    // Two reductions double the filters twice, and a cell concatenates three of its nodes.
    return amoebanet_model({cells, y.positive_int("filters", kWidth / 12), y.positive_int("image", kSide),
                            y.positive_int_or("in_channels", 3, kWidth), y.positive_int("classes")},
                           precision, name);
  }
  if (family == "llm") return llm_from_yaml(y, precision, name, known);
  if (family == "moe") return moe_from_yaml(y, precision, name, known);
  y.fail("family", "unknown family '" + family + "' (valid: transformer, mlp, resnet, amoebanet, llm, moe)");
}

}  // namespace

// grad_precision: gradients accumulated and reduced in fp32 beside 16-bit
// weights (Megatron-LM's main_grad), or in the weights' own precision.
Model model_from_yaml(const YamlFields& y) {
  Model m = model_of_family(y);
  if (m.precision == Precision::FP8 && !has_fp8_products(m)) {
    y.fail("precision", "fp8 runs a transformer block's products with its weights in FP8: family llm, moe or transformer, "
                        "not " + m.family);
  }
  if (y.has("grad_precision")) {
    const Precision g = precision_field(y, "grad_precision");
    // FP8 keeps its weights in BF16.
    const Precision weights = m.precision == Precision::FP8 ? Precision::BF16 : m.precision;
    if (bytes_per_element(g) < bytes_per_element(weights) || (g != weights && g != Precision::FP32)) {
      y.fail("grad_precision", "must be fp32 or the weights' precision (" + std::string(precision_name(weights)) +
                                   "), got " + std::string(precision_name(g)));
    }
    m.grad_precision = g;
  }
  return m;
}

Model model_from_text(const std::string& text, const std::string& source, const std::string& name) {
  if (looks_like_hf_config(text)) {
    return hf_model(parse_hf_config(text, source), name);
  }
  return model_from_yaml(YamlFields(parse_yaml(text, source), source));
}

Model load_model(const std::string& path) {
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    return hf_model(parse_hf_config(schedule::read_file(path), path), std::filesystem::path(path).stem().string());
  }
  return model_from_yaml(YamlFields(load_yaml_file(path), path));
}

}  // namespace pipetwin::models
