// Validation of a Program: shape, ownership, completeness (every F has its B or
// its I and W), order on each rank, matching transfers, and a dry run that
// proves progress. Failures throw ScheduleError, whose message names the rank,
// the step, the action and what was expected, above the step x rank grid.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "schedule/memory.hpp"
#include "schedule/program.hpp"

namespace pipetwin::schedule {

class ScheduleError : public Error {
 public:
  ScheduleError(RankId rank, std::size_t step, std::string what, const std::string& grid);
  RankId rank;
  std::size_t step;
  std::string reason;  // the one-line reason, without the grid
};

struct ValidationReport {
  Program program;      // as validated: lowered first when the input was compute-only
  bool lowered = false; // the input held no transfers and the passes changed it
  DryRun dry_run;       // unit-time dry run
  std::vector<StageMemory> memory;
  std::string summary() const;  // one line
};

ValidationReport validate(const Program& program);

// FSDP's actions, as PyTorch's runtime checks them (part of validate): on
// each rank, a stage that has any alternates UNSHARD and RESHARD, starting
// with an UNSHARD and ending with a RESHARD (the next step's UNSHARD finds
// it sharded), computes only between the two, and reshards only after it
// has computed (the runtime waits for a gather at the stage's next compute).
// Throws ScheduleError at the first action at fault.
void check_unshards(const Program& program);

}  // namespace pipetwin::schedule
