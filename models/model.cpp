// Model-wide sums, the cut sizes of a layer order, and precision names.
#include "models/model.hpp"

#include "schedule/error.hpp"

namespace pipetwin::models {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  if (name == "fp16") return Precision::FP16;
  throw Error("unknown precision '" + std::string(name) + "' (valid: fp32, bf16, fp16)");
}

int bytes_per_element(Precision p) { return p == Precision::FP32 ? 4 : 2; }

std::int64_t as_elems(double bytes, Precision precision) {
  const double b = bytes_per_element(precision);
  return static_cast<std::int64_t>((bytes + b - 1) / b);
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

}  // namespace pipetwin::models
