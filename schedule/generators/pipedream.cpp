// PipeDream (Narayanan et al. 2019): asynchronous 1F1B with weight stashing.
// Each of the M inputs is its own mini-batch; every stage steps its optimizer
// after each backward (no flush), and keeps one weight version per in-flight
// mini-batch so that a backward uses the weights its forward saw. The order is
// 1F1B's with a STEP after every backward:
//
//   rank 0: F0 F1 F2 F3 B0 STEP F4 B1 STEP F5 ...
//
// weight_versions[s] is counted along the order (memory.hpp): the current
// weights plus the older versions that in-flight mini-batches still hold. Once
// the window reaches steady state (M >= 2K - 2) it is K - s, PipeDream's
// "one version per in-flight mini-batch".
#include <algorithm>

#include "schedule/generators.hpp"
#include "schedule/memory.hpp"

namespace pipetwin::schedule {

Program generate_pipedream(const GeneratorOptions& o) {
  const int K = o.ranks, M = o.microbatches;
  Program p = make_program("pipedream", K, 1, M, o.recompute);
  for (int s = 0; s < K; ++s) {
    auto& actions = p.ranks[s];
    const int warmup = std::min(K - s - 1, M);
    const auto backward_and_step = [&](int m) {
      actions.push_back(make_action(Op::B, s, m));
      actions.push_back(make_action(Op::STEP, s, m));
    };
    // 1. Warm-up: forwards only, all with the initial weights.
    for (int m = 0; m < warmup; ++m) actions.push_back(make_action(Op::F, s, m));
    // 2. Steady state: one forward (newest weights), one backward (stashed weights), a step.
    for (int i = 0; i < M - warmup; ++i) {
      actions.push_back(make_action(Op::F, s, warmup + i));
      backward_and_step(i);
    }
    // 3. Cool-down: the remaining backwards, each followed by its step.
    for (int m = M - warmup; m < M; ++m) backward_and_step(m);
  }
  for (const auto& stage : account_memory(p)) p.weight_versions[stage.stage.value] = stage.weight_versions;
  return p;
}

}  // namespace pipetwin::schedule
