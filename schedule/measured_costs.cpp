// median_stage_costs(), bubble_limited_step().
#include "schedule/measured_costs.hpp"

#include <algorithm>
#include <map>

#include "schedule/error.hpp"

namespace pipetwin::schedule {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>((v.size() - 1) / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace

std::vector<StageCosts> median_stage_costs(const Timeline& t, const Program& p) {
  std::map<std::pair<int, Op>, std::vector<double>> durations;
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) {
      if (is_compute(a.action.op) || a.action.op == Op::STEP) durations[{a.action.stage.value, a.action.op}].push_back(a.end - a.start);
    }
  }
  std::vector<StageCosts> out(p.num_stages());
  for (int s = 0; s < p.num_stages(); ++s) {
    const auto of = [&](Op op) {
      const auto it = durations.find({s, op});
      return it == durations.end() ? 0.0 : median(it->second);
    };
    auto& c = out[s];
    c.forward_s = of(Op::F);
    c.backward_s = of(Op::B);
    c.input_grad_s = of(Op::I);
    c.weight_grad_s = of(Op::W);
    c.recompute_s = of(Op::R);
    c.step_s = of(Op::STEP);
  }
  return out;
}

double bubble_limited_step(const Timeline& t, const Program& p) {
  const auto run = evaluate(p, median_stage_costs(t, p));
  if (run.deadlocked()) throw Error("bubble-limited bound: the program deadlocks");
  return run.timeline.makespan();
}

}  // namespace pipetwin::schedule
