// PipeDream (Narayanan et al. 2019): asynchronous 1F1B with weight stashing.
// Each of the M inputs is its own mini-batch; every stage steps its optimizer
// after each backward (no flush), and keeps one weight version per in-flight
// mini-batch so that a backward uses the weights its forward saw. The order is
// 1F1B's with a STEP after every backward:
//
//   rank 0: F0 F1 F2 F3 B0 STEP0 F4 B1 STEP1 F5 ...
//
// weight_versions[s] is counted along the order (memory.hpp): the current
// weights plus the older versions that in-flight mini-batches still hold. Once
// the window reaches steady state (M >= 2K - 2) it is K - s, PipeDream's
// "one version per in-flight mini-batch".
#include "schedule/generators.hpp"
#include "schedule/memory.hpp"

namespace pipetwin::schedule {

Program generate_pipedream(const GeneratorOptions& o) {
  // 1. Warm-up, 2. steady state and 3. cool-down: 1F1B's.
  Program p = generate_1f1b(o);
  p.schedule = "pipedream";
  // 4. No flush: a step right after every backward.
  for (auto& actions : p.ranks) {
    std::vector<Action> out;
    out.reserve(actions.size() * 3 / 2);
    for (const auto& a : actions) {
      out.push_back(a);
      if (a.op == Op::B) out.push_back(Action{Op::STEP, a.stage, a.microbatch});
    }
    actions = std::move(out);
  }
  for (const auto& stage : account_memory(p)) p.weight_versions[stage.stage.value] = stage.weight_versions;
  return p;
}

}  // namespace pipetwin::schedule
