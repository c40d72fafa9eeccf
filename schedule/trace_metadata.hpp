// What a trace records of the run or simulation that produced it (its
// otherData), typed: `pipetwin run` and `pipetwin simulate` write it;
// calibrate (calibration/traces), compare (calibration/compare) and the
// plots (plots/common.py, TraceMeta) read the same fields.
//
//   otherData: {model, hardware, schedule, ranks, stages_per_rank,   <- the configuration
//               microbatches, microbatch_size, batch, recompute, partition,
//               producer, model_spec, hardware_spec, program,         <- what makes it stand alone
//               predicted_stash_bytes_per_stage,
//               device, step, summary, measured, engine_reason}       <- the producer's own
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "schedule/program.hpp"

namespace pipetwin::schedule {

struct TraceMetadata {
  // The configuration (configuration_fields(), plus the hardware and batch).
  std::string model, hardware, schedule;
  int ranks = 1, stages_per_rank = 1, microbatches = 1, microbatch_size = 1;
  double batch = 0;
  std::string recompute = "none";
  std::vector<LayerRange> partition;
  // What makes the trace stand alone.
  std::string producer;                       // "pipetwin run", "pipetwin simulate"
  std::string model_spec, hardware_spec;      // the model YAML; the hardware's preset name or YAML
  std::optional<std::string> program;         // the Program's text form (io.hpp); older traces lack it
  std::optional<std::string> optimizer;       // "sgd", "momentum", "adam"; older traces lack it
  std::vector<double> predicted_stash_bytes_per_stage;
  // The producer's own sections (device, step, summary, measured,
  // engine_reason), as they are: each reader checks what it uses.
  nlohmann::json sections = nlohmann::json::object();

  // The configuration alone (what `simulate --json` and `run --json` open with).
  nlohmann::json configuration_json() const;
  nlohmann::json to_json() const;
};

// The fields two traces must share to describe the same configuration
// (plots/common.py's CONFIG_FIELDS lists the same).
const std::vector<std::string>& configuration_fields();

// Reads otherData; throws pipetwin::Error naming `path` and the field that is
// missing or of the wrong type (a partition's size and continuity against
// the model are the reader's to check: the model comes from model_spec).
TraceMetadata read_trace_metadata(const nlohmann::json& other_data, const std::string& path);

}  // namespace pipetwin::schedule
