// Does a configuration share anything that two activities could contend for?
// The timed evaluator (schedule/dry_run.hpp) is exact exactly when not: no two
// transfers in flight on the same directed link at once, and never more ranks
// computing on a shared host than it has cores. Checked on the evaluator's own
// timeline: if it shows no overlap, SimGrid's replay is the same timeline.
#pragma once

#include <string>
#include <vector>

#include "models/hardware.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/program.hpp"

namespace pipetwin::models {

struct ContentionCheck {
  bool contention_free = true;
  std::string reason;  // the first overlap found, or why there is none
};

ContentionCheck check_contention(const schedule::Timeline& timeline, const schedule::Program& program,
                                 const std::vector<schedule::StageCosts>& costs, const Topology& topology);

}  // namespace pipetwin::models
