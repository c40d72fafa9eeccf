// How rank 0 turns the ranks' reports into one run (torch-free, so it is
// tested without processes): steps aligned on rank 0's clock, each shifted to
// start at 0, the median step, the stages' measured memory.
#pragma once

#include <vector>

#include "exec/run.hpp"

namespace pipetwin::exec {

RunResult assemble(std::vector<RankReport> reports, int stages);

}  // namespace pipetwin::exec
