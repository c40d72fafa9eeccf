// SyntheticTask: deterministic mini-batches with a learnable target.
#include "exec/torch_task.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include "exec/torch_layers.hpp"

namespace pipetwin::exec {
namespace {

at::Generator generator(std::uint64_t seed, std::uint64_t stream) {
  return at::make_generator<at::CPUGeneratorImpl>(seed * 0x9e3779b97f4a7c15ULL + stream * 0xda942042e4dd58b5ULL + 1);
}

std::int64_t classes_of(const models::Model& m) {
  const auto& last = m.layers.back();
  return last.shape.out_features > 0 ? last.shape.out_features : last.shape.vocab;
}

// Token ids in, one target token per position (the transformer and llm families).
bool takes_tokens(const models::Model& m) { return input_dtype(m) == at::kLong; }

}  // namespace

SyntheticTask::SyntheticTask(const models::Model& model, std::uint64_t seed, int batch)
    : model_(model), seed_(seed), batch_(batch) {
  auto gen = generator(seed, 0);
  if (takes_tokens(model)) {
    mapping_ = at::randperm(model.layers.front().shape.vocab, gen, at::TensorOptions(at::kLong));
  } else {
    const auto in = input_shape(model);
    mapping_ = at::randn({classes_of(model), in.front()}, gen);
  }
}

Batch SyntheticTask::minibatch(int step) const {
  auto gen = generator(seed_, static_cast<std::uint64_t>(step) + 1);
  std::vector<std::int64_t> shape{batch_};
  for (const auto d : input_shape(model_)) shape.push_back(d);
  Batch b;
  if (takes_tokens(model_)) {
    b.inputs = at::randint(0, model_.layers.front().shape.vocab, shape, gen, at::TensorOptions(at::kLong));
    b.targets = mapping_.index({b.inputs});
    return b;
  }
  b.inputs = at::randn(shape, gen);
  const auto features = b.inputs.dim() == 4 ? b.inputs.mean({2, 3}) : b.inputs;
  b.targets = at::matmul(features, mapping_.t()).argmax(-1);
  b.inputs = b.inputs.to(dtype_of(model_.precision));
  return b;
}

}  // namespace pipetwin::exec
