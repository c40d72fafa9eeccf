// sim_input: the Program, the stage table and the topology.
#include "sim/from_model.hpp"

#include "models/stage_table.hpp"

namespace pipetwin::sim {

SimInput sim_input(const models::StageCostModel& costs, const models::Hardware& hardware,
                   const schedule::Program& program) {
  return {program, models::stage_table(costs, hardware, program), hardware.topology};
}

}  // namespace pipetwin::sim
