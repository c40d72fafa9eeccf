// The optimizer step part of fit(): STEP = step_overhead + traffic /
// memory_bandwidth, the traffic the optimizer's bytes for the stage's
// parameters (StageCostModel::step_s on a unit bandwidth).
#include "calibration/fit_parts.hpp"

#include "calibration/least_squares.hpp"
#include "models/stage_costs.hpp"

namespace pipetwin::calibration::fitting {
namespace pm = pipetwin::models;

void fit_step(const std::vector<StepGroup>& steps, const pm::Hardware& base, pm::Device& device, FitResult& result) {
  Problem prob;
  Param slope;
  slope.name = "step.seconds_per_byte";
  slope.on_dependent = Param::OnDependent::FixValue;
  slope.fixed_value = device.memory_bandwidth > 0 ? 1 / device.memory_bandwidth : 0;
  slope.why_dependent = "every stage updates as many parameters: the base memory bandwidth is kept";
  slope.strictly_above = true;
  slope.bound_value = slope.fixed_value;
  slope.why_bounded = "kept from the base (fitted slope not positive)";
  prob.params = {non_negative("step.overhead_s"), slope};
  for (const auto& g : steps) {
    pm::Hardware unit = base;  // step_s on a unit bandwidth is the traffic in bytes
    unit.device.memory_bandwidth = 1;
    unit.device.step_overhead_s = 0;
    unit.devices.clear();
    const pm::StageCostModel probe(g.run->model, unit, request_of(*g.run));
    const auto [i, j] = g.run->program.partition.at(g.stage);
    prob.x.push_back({1, probe.step_s(i, j, g.stage)});
    prob.y.push_back(g.measured);
  }
  if (prob.y.empty()) {
    result.notes.push_back("no STEP actions: the optimizer step keeps the base device's cost");
    return;
  }
  const Solution sol = robust_solve(prob);
  device.step_overhead_s = sol.value[0];
  if (sol.value[1] > 0) device.memory_bandwidth = 1 / sol.value[1];
  record(result.coefficients, prob, sol);
}

}  // namespace pipetwin::calibration::fitting
