// Human-readable grids of a program.
//
// Order grid (errors): row i holds the i-th action of every rank; marked cells
// are drawn >like this< and their row ends with "<-- ERROR HERE".
// Time grid (`pipetwin schedule --format grid`): row t is the unit-time slot
// [t, t+1) of the dry run; each cell is the compute action running there, "."
// when the rank waits.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::schedule {

struct GridMark {
  RankId rank;
  std::size_t step = 0;
};

std::string format_order_grid(const Program& program, const std::vector<GridMark>& marks);
std::string format_time_grid(const Program& program, const Timeline& timeline);

}  // namespace pipetwin::schedule
