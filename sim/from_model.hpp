// Stage times and transfer sizes of a Program from a model, a hardware spec
// and the partition held by the Program.
#pragma once

#include "models/stage_costs.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::sim {

SimInput sim_input(const models::StageCostModel& costs, const models::Hardware& hardware,
                   const schedule::Program& program);

}  // namespace pipetwin::sim
