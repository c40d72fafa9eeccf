// Model-wide sums, the cut sizes of a layer order, and precision names.
#include "models/model.hpp"

#include <algorithm>

#include "schedule/error.hpp"

namespace pipetwin::models {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
    case Precision::FP8: return "fp8";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  if (name == "fp16") return Precision::FP16;
  if (name == "fp8") return Precision::FP8;
  throw Error("unknown precision '" + std::string(name) + "' (valid: fp32, bf16, fp16, fp8)");
}

int bytes_per_element(Precision p) { return p == Precision::FP32 ? 4 : 2; }  // FP8 keeps its tensors in BF16

std::int64_t as_elems(double bytes, Precision precision) {
  const double b = bytes_per_element(precision);
  return static_cast<std::int64_t>((bytes + b - 1) / b);
}

bool has_fp8_products(const Model& model) {
  return std::any_of(model.layers.begin(), model.layers.end(), [](const Layer& l) { return l.cost.fp8_flops > 0; });
}

Model with_precision(Model model, std::string_view name) {
  if (name.empty()) return model;
  const Precision p = parse_precision(name);
  if (p == model.precision) return model;
  if (p == Precision::FP32 || model.precision == Precision::FP32) {
    throw Error("--precision " + std::string(name) + ": model " + model.name + " is built in " +
                std::string(precision_name(model.precision)) +
                "; the option moves a 16-bit model between bf16, fp16 and fp8 (set precision in the model's spec)");
  }
  if (p == Precision::FP8 && !has_fp8_products(model)) {
    throw Error("--precision fp8: model " + model.name + " (family " + model.family +
                ") has no products FP8 runs (the transformer and llm families' blocks)");
  }
  model.precision = p;
  return model;
}

std::string_view kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::Embedding: return "embedding";
    case LayerKind::TransformerBlock: return "transformer_block";
    case LayerKind::LmHead: return "lm_head";
    case LayerKind::Linear: return "linear";
    case LayerKind::Conv: return "conv";
    case LayerKind::SepConv: return "sep_conv";
    case LayerKind::Pool: return "pool";
    case LayerKind::Add: return "add";
    case LayerKind::Concat: return "concat";
    case LayerKind::ResidualBlock: return "residual_block";
    case LayerKind::ClassifierHead: return "classifier_head";
    case LayerKind::LlmEmbedding: return "llm_embedding";
    case LayerKind::DecoderBlock: return "decoder_block";
    case LayerKind::MoeBlock: return "moe_block";
    case LayerKind::LlmHead: return "llm_head";
  }
  return "?";
}

std::int64_t Model::params() const {
  std::int64_t total = 0;
  for (const auto& l : layers) total += l.cost.params;
  return total;
}

double Model::forward_flops() const {
  double total = 0;
  for (const auto& l : layers) total += l.cost.forward_flops;
  return total;
}

std::vector<std::pair<int, int>> Model::edges() const {
  std::vector<std::pair<int, int>> out;
  for (int v = 0; v < static_cast<int>(layers.size()); ++v) {
    for (const int u : layers[v].inputs) out.emplace_back(u, v);
  }
  return out;
}

std::vector<std::int64_t> Model::cut_elems() const {
  const int n = static_cast<int>(layers.size());
  // last_use[u]: the latest position that consumes layer u's output.
  std::vector<int> last_use(n, -1);
  for (int v = 0; v < n; ++v) {
    for (const int u : layers[v].inputs) last_use[u] = std::max(last_use[u], v);
  }
  // Tensor u crosses every cut p with u < p <= last_use[u]: a difference array.
  std::vector<std::int64_t> delta(n + 1, 0);
  for (int u = 0; u < n; ++u) {
    if (last_use[u] > u) {
      delta[u + 1] += layers[u].cost.output_elems;
      delta[last_use[u] + 1] -= layers[u].cost.output_elems;
    }
  }
  std::vector<std::int64_t> cut(n + 1, 0);
  std::int64_t running = 0;
  for (int p = 0; p <= n; ++p) {
    running += delta[p];
    cut[p] = running;
  }
  cut[0] = input_elems;           // the model input, fed to the first stage
  if (n > 0) cut[n] = 0;          // nothing leaves the last stage but the loss
  return cut;
}

double pass_weight_bytes(const Model& model, int index) {
  const Layer& layer = model.layers.at(index);
  if (layer.kind == LayerKind::Embedding || layer.kind == LayerKind::LlmEmbedding) return 0;
  return static_cast<double>(layer.cost.params) * bytes_per_element(model.precision);
}

int operators(const Model& model, int index) {
  const Layer& layer = model.layers.at(index);
  const LayerShape& s = layer.shape;
  const bool loss = index + 1 == static_cast<int>(model.layers.size());
  const int cross_entropy = 2;  // log-softmax and the loss over it
  switch (layer.kind) {
    case LayerKind::Embedding: return 2;  // the lookup, the positions added
    // layer norm, qkv linear, scores matmul, scale, softmax, context matmul,
    // heads merged (a copy), output linear, residual add; layer norm, linear,
    // GELU, linear, residual add
    case LayerKind::TransformerBlock: return 14;
    case LayerKind::LmHead: return 2 + cross_entropy;  // layer norm, linear
    case LayerKind::Linear: return 1 + (s.relu ? 1 : 0) + (loss ? cross_entropy : 0);
    case LayerKind::Conv: return 2 + (s.relu ? 1 : 0);     // conv, batch norm
    case LayerKind::SepConv: return 3 + (s.relu ? 1 : 0);  // depthwise, pointwise, batch norm
    case LayerKind::Pool:
    case LayerKind::Add:
    case LayerKind::Concat: return 1;
    case LayerKind::ResidualBlock: {  // conv, bn, relu, conv, bn, the skip's conv and bn, add, relu
      const bool projection = s.stride != 1 || s.in_channels != s.out_channels;
      return 7 + (projection ? 2 : 0);
    }
    case LayerKind::ClassifierHead: return 2 + cross_entropy;  // mean, linear
    case LayerKind::LlmEmbedding: return 1 + (s.positions > 0 ? 2 : 0);
    case LayerKind::DecoderBlock: {
      // norm (RMS: 5 elementwise), q, k, v, (rotary: 8), (GQA repeat: 2),
      // attention (flash: 1; else 5), merge, output, add; norm, MLP, add
      const int norm = s.rms_norm ? 5 : 1;
      const int rotary = s.positions == 0 ? 8 : 0;
      const int gqa = s.kv_heads > 0 && s.kv_heads != s.heads ? 2 : 0;
      const int attention = s.flash_attention ? 1 : 5;
      const int mlp = s.swiglu ? 5 : 3;
      return 2 * norm + 3 + rotary + gqa + attention + 3 + 1 + mlp + 1;
    }
    case LayerKind::MoeBlock: {
      // the decoder block's attention half (RMS norm, q, k, v, rotary, GQA
      // repeat, flash attention, merge, output, add), then norm, router
      // (linear, top-k, softmax), permute, the experts' grouped SwiGLU (gate
      // and up, silu, product, down), unpermute with the weights, add
      const int rotary = s.positions == 0 ? 8 : 0;
      const int gqa = s.kv_heads > 0 && s.kv_heads != s.heads ? 2 : 0;
      return 5 + 3 + rotary + gqa + 1 + 3 + 1 + 5 + 3 + 1 + 4 + 2 + 1;
    }
    case LayerKind::LlmHead: return (s.rms_norm ? 5 : 1) + 1 + cross_entropy;
  }
  return 1;
}

}  // namespace pipetwin::models
