// The learnable synthetic task each rank generates for itself (internal to
// exec/: includes LibTorch). Nothing is downloaded; every rank derives the
// same mini-batch from (seed, step), so stage 0 (inputs) and the last stage
// (targets) agree without exchanging data, whatever K and M are.
//
//   transformer   tokens ~ U[0, vocab);   target[t] = perm[token[t]]
//   mlp, conv     x ~ N(0, 1);            target = argmax(T · features(x))
//                 (features: x itself, or its per-channel mean for images)
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "models/model.hpp"

namespace pipetwin::exec {

struct Batch {
  at::Tensor inputs;   // [N, ...input_shape]
  at::Tensor targets;  // [N, seq] token ids or [N] classes
};

class SyntheticTask {
 public:
  SyntheticTask(const models::Model& model, std::uint64_t seed, int batch);
  // The whole mini-batch of step `step`, on the CPU.
  Batch minibatch(int step) const;
  int batch() const { return batch_; }

 private:
  const models::Model& model_;
  std::uint64_t seed_;
  int batch_;
  at::Tensor mapping_;  // the permutation or the teacher matrix
};

}  // namespace pipetwin::exec
