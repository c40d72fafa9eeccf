// Activation checkpointing inside a stage (internal to exec/: includes
// LibTorch), as Megatron-LM and torchtitan run it, beside the whole-stage
// recompute of the R action:
//
//   checkpointed(body, inputs)  runs `body` without autograd, keeps only its
//       inputs, and in the backward runs it again with autograd and
//       backpropagates through that re-run (the weights `body` reads
//       accumulate their gradients there). A group of layers
//       (--recompute uniform:N, block:N) or an attention core (selective)
//       is one body.
//   SelectiveRecompute  while one is alive (a stage's forward under
//       --recompute selective), every attention core is checkpointed.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace pipetwin::exec {

using CheckpointBody = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// `body`'s outputs, checkpointed where autograd records (else `body` run
// plainly). `body` must compute the same outputs from the same inputs twice
// (no randomness, no state).
std::vector<at::Tensor> checkpointed(const CheckpointBody& body, const std::vector<at::Tensor>& inputs);

class SelectiveRecompute {
 public:
  explicit SelectiveRecompute(bool on);
  ~SelectiveRecompute();
  SelectiveRecompute(const SelectiveRecompute&) = delete;
  SelectiveRecompute& operator=(const SelectiveRecompute&) = delete;

 private:
  bool previous_;
};

// The attention core `core(q, k, v)` (scores, mask, softmax, context),
// checkpointed under a SelectiveRecompute.
at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& core);

// softmax(q kᵀ / √dh) v, unmasked (the transformer family's block).
std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)> scaled_softmax_core(std::int64_t dh);

}  // namespace pipetwin::exec
