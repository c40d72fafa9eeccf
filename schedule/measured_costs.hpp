// Stage costs read off a timeline (measured or predicted): per stage, the
// median duration of each compute op over its micro-batches. Fed to the
// timed evaluator with free transfers, they give the step time that the
// schedule's dependencies alone allow on these per-stage times: the
// bubble-limited bound that a run's pipeline efficiency is measured against.
#pragma once

#include <vector>

#include "schedule/dry_run.hpp"
#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::schedule {

// One entry per stage of `program`; ops a stage never ran cost 0.
std::vector<StageCosts> median_stage_costs(const Timeline& timeline, const Program& program);

// The timed evaluator's step time on those costs with transfers free.
double bubble_limited_step(const Timeline& timeline, const Program& program);

}  // namespace pipetwin::schedule
