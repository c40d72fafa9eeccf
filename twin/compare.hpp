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

// A torch.profiler run (a folder of one trace per rank) against its
// prediction on a cost table: the run's own order of actions, timed by the
// evaluator on the table (moved to batch / M samples per micro-batch where
// `batch` is given), compared as compare_files compares two traces, on the
// actions both have (the run's transfers where it labels them, never the
// optimizer steps). `repeats`: other runs of the same configuration.
struct CostsCompareRequest {
  std::string costs, measured;
  std::string costs_text;  // the table's YAML or JSON itself, named `costs` (else `costs` is its file)
  int batch = 0;
  std::vector<std::string> repeats;
  std::string traces;  // "": none; else PREFIX.predicted.json and PREFIX.measured.json are written
};
calibration::Comparison compare_costs(const CostsCompareRequest& request);

}  // namespace pipetwin::twin
