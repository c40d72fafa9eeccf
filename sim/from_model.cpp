// sim_input: one StageTimes per stage of the Program's partition.
#include "sim/from_model.hpp"

#include "schedule/error.hpp"

namespace pipetwin::sim {

SimInput sim_input(const models::StageCostModel& costs, const models::Hardware& hardware,
                   const schedule::Program& program) {
  if (static_cast<int>(program.partition.size()) != program.num_stages()) {
    throw Error("simulation: the program has no partition (layers per stage); partition it first");
  }
  SimInput in;
  in.program = program;
  in.topology = hardware.topology;
  in.transfer_overhead_s = hardware.device.transfer_overhead_s;
  const int S = program.num_stages();
  for (int s = 0; s < S; ++s) {
    const auto [i, j] = program.partition[s];
    StageTimes t;
    t.forward_s = costs.forward_s(i, j, s);
    t.input_grad_s = costs.input_grad_s(i, j, s);
    t.weight_grad_s = costs.weight_grad_s(i, j, s);
    t.recompute_s = t.forward_s;
    t.step_s = costs.step_s(i, j, s);
    t.activation_bytes = s + 1 < S ? costs.cut_bytes(j) : 0;
    t.gradient_bytes = s > 0 ? costs.cut_bytes(i) : 0;
    in.stages.push_back(t);
  }
  return in;
}

}  // namespace pipetwin::sim
