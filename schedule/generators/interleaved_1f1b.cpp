// Interleaved 1F1B (Megatron-LM): each rank holds V chunks (stages r, r+K, ...,
// r+(V-1)K) and walks the M*V virtual micro-batches in groups of K per chunk:
//
//   k-th forward : chunk (k mod KV) / K,          micro-batch (k / KV)*K + k mod K
//   k-th backward: chunk V-1 - (k mod KV) / K,    same micro-batch
//
// Rank r warms up with (K-r-1)*2 + (V-1)*K forwards (all of them when M == K),
// then alternates forward and backward, then drains. Needs M to be a multiple of K.
#include <algorithm>

#include "schedule/generators.hpp"

namespace pipetwin::schedule {
namespace {

Action virtual_action(Op op, int k, int rank, int K, int V) {
  const int group = k % (K * V);
  const int chunk = op == Op::F ? group / K : V - 1 - group / K;
  const int microbatch = (k / (K * V)) * K + k % K;
  return make_action(op, chunk * K + rank, microbatch);
}

}  // namespace

Program generate_interleaved_1f1b(const GeneratorOptions& o) {
  const int K = o.ranks, M = o.microbatches, V = o.stages_per_rank;
  const int total = M * V;
  Program p = make_program("interleaved-1f1b", K, V, M, o.recompute);
  for (int r = 0; r < K; ++r) {
    auto& actions = p.ranks[r];
    const int warmup = M == K ? total : std::min((K - r - 1) * 2 + (V - 1) * K, total);
    // 1. Warm-up: forwards only.
    for (int k = 0; k < warmup; ++k) actions.push_back(virtual_action(Op::F, k, r, K, V));
    // 2. Steady state: one forward, one backward.
    for (int k = 0; k < total - warmup; ++k) {
      actions.push_back(virtual_action(Op::F, warmup + k, r, K, V));
      actions.push_back(virtual_action(Op::B, k, r, K, V));
    }
    // 3. Cool-down: the remaining backwards.
    for (int k = total - warmup; k < total; ++k) actions.push_back(virtual_action(Op::B, k, r, K, V));
  }
  return p;
}

}  // namespace pipetwin::schedule
