// The per-stage cost table of a partitioned Program: action times from the
// StageCostModel, transfer sizes from the cuts, flight times from the
// topology's route between the two ranks (latency + bytes / narrowest hop).
#pragma once

#include <vector>

#include "models/stage_costs.hpp"
#include "schedule/dry_run.hpp"

namespace pipetwin::models {

std::vector<schedule::StageCosts> stage_table(const StageCostModel& costs, const Hardware& hardware,
                                              const schedule::Program& program);

}  // namespace pipetwin::models
