// The dry run: every rank's interpreter driven by a polling backend with fixed
// op durations and instantaneous transfers (or a fixed transfer time). It
// proves that a program makes progress, and gives its unit-time Timeline.
#pragma once

#include <string>
#include <vector>

#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::schedule {

struct OpDurations {
  double forward = 1, backward = 1, input_grad = 1, weight_grad = 1, recompute = 1;
  double transfer = 0;  // from a send's post to the data being available
  double step = 0;
  double of(Op op) const;
};

struct BlockedRank {
  RankId rank;
  std::size_t step = 0;  // index in the rank's action list
  Action action;         // the receive it is stuck on
  Action waiting_for;    // the send that never comes
};

struct DryRun {
  Timeline timeline;
  std::vector<BlockedRank> blocked;  // empty unless the program deadlocks
  bool deadlocked() const { return !blocked.empty(); }
};

// A program without transfers is lowered first (passes.hpp), so that data
// crossing ranks is waited for; the Timeline then holds the lowered actions.
DryRun dry_run(const Program& program, const OpDurations& durations = {});

}  // namespace pipetwin::schedule
