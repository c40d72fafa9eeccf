// account_memory: replays each rank's list through the StashTracker.
#include "schedule/memory.hpp"

#include <algorithm>

#include "schedule/interpreter.hpp"

namespace pipetwin::schedule {

double stash_bytes(const std::array<int, 3>& state, double activation_bytes, double input_bytes, double weight_grad_bytes) {
  const auto [whole, weight_only, inputs] = state;
  return whole * activation_bytes + weight_only * weight_grad_bytes + inputs * input_bytes;
}

double StageMemory::peak_bytes(double activation_bytes, double input_bytes, double weight_grad_bytes) const {
  double peak = 0;
  for (const auto& state : frontier) peak = std::max(peak, stash_bytes(state, activation_bytes, input_bytes, weight_grad_bytes));
  return peak;
}

std::vector<StageMemory> account_memory(const Program& program) {
  StashTracker tracker(program);
  for (const auto& actions : program.ranks) {
    for (const auto& action : actions) tracker.apply(action);
  }
  std::vector<StageMemory> out;
  for (int s = 0; s < program.num_stages(); ++s) {
    const auto& st = tracker.stage(StageId{s});
    out.push_back({StageId{s}, st.peak_full, st.peak_inputs, st.peak_total, st.peak_versions, st.frontier});
  }
  return out;
}

}  // namespace pipetwin::schedule
