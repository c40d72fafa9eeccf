// A SimInput from a partitioned Program, its cost model and the hardware.
#pragma once

#include "models/stage_costs.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::sim {

SimInput sim_input(const models::StageCostModel& costs, const models::Hardware& hardware,
                   const schedule::Program& program);

}  // namespace pipetwin::sim
