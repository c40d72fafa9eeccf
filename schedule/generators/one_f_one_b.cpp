// 1F1B (PipeDream-Flush): stage s runs min(K-s-1, M) warm-up forwards, then
// alternates one forward and one backward, then drains the remaining backwards.
// At most min(K-s, M) micro-batches are stashed on stage s.
//
//   rank 0: F0 F1 F2 F3 .  .  B0 F4 B1 F5 B2 F6 B3 F7 ...
//   rank 3:          F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 ...
#include <algorithm>

#include "schedule/generators.hpp"

namespace pipetwin::schedule {

Program generate_1f1b(const GeneratorOptions& o) {
  const int K = o.ranks, M = o.microbatches;
  Program p = make_program("1f1b", K, 1, M, o.recompute);
  for (int s = 0; s < K; ++s) {
    auto& actions = p.ranks[s];
    const int warmup = std::min(K - s - 1, M);
    // 1. Warm-up: forwards only.
    for (int m = 0; m < warmup; ++m) actions.push_back(make_action(Op::F, s, m));
    // 2. Steady state: one forward, one backward.
    for (int i = 0; i < M - warmup; ++i) {
      actions.push_back(make_action(Op::F, s, warmup + i));
      actions.push_back(make_action(Op::B, s, i));
    }
    // 3. Cool-down: the remaining backwards.
    for (int m = M - warmup; m < M; ++m) actions.push_back(make_action(Op::B, s, m));
  }
  return p;
}

}  // namespace pipetwin::schedule
