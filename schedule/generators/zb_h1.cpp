// ZB-H1 (zero bubble, Qi et al. 2024): the backward is split into I (input
// gradient, on the critical path) and W (weight gradient, off it). Rank r warms
// up with min(K-r, M) forwards like 1F1B, then runs I, F pairs and defers each W
// by r micro-batches, so that deferred Ws fill the cool-down bubbles:
//
//   rank 0: F0 F1 F2 F3 .  .  .  I0 W0 F4 I1 W1 F5 ...
//   rank 3:          F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 ...
//
// With F = I = W the step takes 3M + K - 1 units (bubble (K-1)(F+I-W)), against
// 3(M + K - 1) for 1F1B; the largest stash over all stages stays min(K, M), as in 1F1B.
#include <algorithm>
#include <utility>

#include "schedule/generators.hpp"

namespace pipetwin::schedule {

Program zero_bubble_h(std::string name, const GeneratorOptions& o, int (*warmup_of)(int K, int r),
                      int (*deferral_of)(int K, int r)) {
  const int K = o.ranks, M = o.microbatches;
  Program p = make_program(std::move(name), K, 1, M, o.recompute);
  for (int r = 0; r < K; ++r) {
    auto& actions = p.ranks[r];
    const int warmup = std::min(warmup_of(K, r), M);
    const int deferral = deferral_of(K, r);  // W of micro-batch j runs after I of micro-batch j + deferral
    int next_forward = 0, next_weight = 0;
    // 1. Warm-up: forwards only.
    for (; next_forward < warmup; ++next_forward) actions.push_back(make_action(Op::F, r, next_forward));
    // 2. Steady state and 3. cool-down: I, a deferred W, the next F while any is left.
    for (int j = 0; j < M; ++j) {
      actions.push_back(make_action(Op::I, r, j));
      if (j - deferral >= 0) actions.push_back(make_action(Op::W, r, next_weight++));
      if (next_forward < M) actions.push_back(make_action(Op::F, r, next_forward++));
    }
    // 4. Flush: the Ws still deferred.
    for (; next_weight < M; ++next_weight) actions.push_back(make_action(Op::W, r, next_weight));
  }
  return p;
}

Program generate_zb_h1(const GeneratorOptions& o) {
  return zero_bubble_h(
      "zb-h1", o, [](int K, int r) { return K - r; }, [](int, int r) { return r; });
}

}  // namespace pipetwin::schedule
