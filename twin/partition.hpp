// partition_report: a model's layers split over K ranks by one method, and
// the other methods' splits to compare it with (`pipetwin partition`).
// models/partition does the work; this builds its request from the options.
#pragma once

#include <string>
#include <vector>

#include "models/families.hpp"
#include "models/partition.hpp"

namespace pipetwin::twin {

struct PartitionSpec {
  std::string model, hardware, schedule = "gpipe", recompute, method = "optimal", optimizer = "adam";
  int ranks = 0, microbatches = 0, virtual_stages = 0, microbatch_size = 1;  // 0: not given (M: 1 with a generator)
};

struct PartitionReport {
  models::Model model;
  models::Hardware hardware;
  models::PartitionRequest request;
  models::Method method = models::Method::Optimal;
  models::Partition chosen;
  std::vector<models::Partition> others;  // the other methods' that could split it
};

// Throws pipetwin::Error naming the option or file at fault, or
// models::OutOfMemory where the chosen method finds no split that fits.
PartitionReport partition_report(const PartitionSpec& spec);

}  // namespace pipetwin::twin
