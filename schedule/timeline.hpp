// A Timeline: when each action of each rank started and ended. Predicted
// timelines (dry run, sim/) and measured ones (exec/) share this type.
#pragma once

#include <vector>

#include "schedule/action.hpp"

namespace pipetwin::schedule {

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct Timeline {
  std::vector<std::vector<TimedAction>> ranks;

  double makespan() const;
  // Time rank `r` spends in compute actions (F B I W R).
  double busy(RankId r) const;
  // 1 - busy / makespan: the rank's share of the step spent waiting.
  double idle_fraction(RankId r) const;
  // Every rank's idle fraction, in one pass over the actions (the makespan
  // found once, not once per rank).
  std::vector<double> idle_fractions() const;
  // Mean idle fraction over all ranks: the bubble overhead.
  double bubble_fraction() const;
};

}  // namespace pipetwin::schedule
