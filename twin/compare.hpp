// compare_files: a predicted trace against a measured one (and that run's
// repeats), read from their files; optionally both checked against the
// schedule file they must have run. calibration/compare does the work.
#pragma once

#include <string>
#include <vector>

#include "calibration/compare.hpp"

namespace pipetwin::twin {

struct CompareRequest {
  std::string predicted, measured;   // simulate --trace, run --trace
  std::string schedule;              // "": not checked
  std::vector<std::string> repeats;  // other runs of the measured configuration
};

// Throws pipetwin::Error naming the file at fault. `notes` gets what reading
// the schedule file said.
calibration::Comparison compare_files(const CompareRequest& request, std::vector<std::string>* notes = nullptr);

}  // namespace pipetwin::twin
