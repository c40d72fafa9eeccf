// Memory accounting in micro-batches, along each rank's order (no timing
// needed): how many micro-batches each stage stashes at its peak, and how many
// weight versions it must keep. models/ turns these counts into bytes.
#pragma once

#include <array>
#include <vector>

#include "schedule/program.hpp"

namespace pipetwin::schedule {

struct StageMemory {
  StageId stage;
  int peak_activations = 0;  // micro-batches with activations stashed (whole, or after I what W needs)
  int peak_inputs = 0;       // checkpointed micro-batches: only the stage input kept
  int peak_in_flight = 0;    // peak of both together
  int weight_versions = 1;   // distinct weight versions alive at the peak
  // The (whole, weight-only, inputs) states that can be the peak in bytes,
  // whatever the size of a micro-batch's activations, of what its deferred
  // weight gradient keeps after its I, and of a stage input.
  std::vector<std::array<int, 3>> frontier;
  double peak_bytes(double activation_bytes, double input_bytes, double weight_grad_bytes) const;
};

// The bytes of a (whole, weight-only, inputs) stash state.
double stash_bytes(const std::array<int, 3>& state, double activation_bytes, double input_bytes, double weight_grad_bytes);

std::vector<StageMemory> account_memory(const Program& program);

}  // namespace pipetwin::schedule
