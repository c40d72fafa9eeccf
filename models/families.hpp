// The built-in model families and the YAML model spec that names one.
//
//   family: transformer   T(L, H, A) of GPipe: layers, d_ff, heads (+ d_model, seq_len, vocab)
//   family: mlp           input, hidden: [..], output
//   family: resnet        image, in_channels, stem_channels, stages: [..], classes
//   family: amoebanet     cells (N), filters (F), image, in_channels, classes
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

Model transformer_model(const TransformerSpec& spec, Precision precision, std::string name);
Model mlp_model(const MlpSpec& spec, Precision precision, std::string name);
Model resnet_model(const ResNetSpec& spec, Precision precision, std::string name);
Model amoebanet_model(const AmoebaNetSpec& spec, Precision precision, std::string name);

// Closed form of the Transformer's parameter count (for tests and docs):
//   embeddings V·d + s·d, per block 4d² + 2·d·d_ff + 9d + d_ff, head 2d + d·V + V.
std::int64_t transformer_params_closed_form(const TransformerSpec& spec);

Model model_from_yaml(const YamlFields& fields);
Model load_model(const std::string& path);

}  // namespace pipetwin::models
