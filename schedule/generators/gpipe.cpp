// GPipe (fill-drain): every rank runs all M forwards, then all M backwards.
//
//   rank 0: F0 F1 F2 F3 . . . . . . B0 B1 B2 B3
//   rank 1:    F0 F1 F2 F3 . . . B0 B1 B2 B3
//
// Every stage stashes all M micro-batches at the peak.
#include "schedule/generators.hpp"

namespace pipetwin::schedule {

Program generate_gpipe(const GeneratorOptions& o) {
  Program p = make_program("gpipe", o.ranks, 1, o.microbatches, o.recompute);
  for (int r = 0; r < o.ranks; ++r) {
    auto& actions = p.ranks[r];
    // 1. Fill: all forwards.
    for (int m = 0; m < o.microbatches; ++m) actions.push_back(make_action(Op::F, r, m));
    // 2. Drain: all backwards, in micro-batch order.
    for (int m = 0; m < o.microbatches; ++m) actions.push_back(make_action(Op::B, r, m));
  }
  return p;
}

}  // namespace pipetwin::schedule
