// The options that name one pipeline configuration (model, hardware,
// schedule, K, M, V, batch, recompute, partition), shared by the commands
// that simulate or run it, and the objects they build from them.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/families.hpp"
#include "models/stage_costs.hpp"
#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::cli {

struct ScenarioOptions {
  std::string model, hardware, schedule;
  int ranks = 0, microbatches = 0, virtual_stages = 1, batch = 0;
  std::string recompute = "none", partition = "auto", optimizer = "adam";
};

void add_scenario_options(CLI::App* cmd, ScenarioOptions& o);

struct Scenario {
  models::Model model;
  models::Hardware hardware;
  models::PartitionRequest request;
  schedule::Program program;  // complete, validated, partitioned
  std::unique_ptr<models::StageCostModel> costs;
  double samples = 0;         // per step: batch
  nlohmann::json describe() const;
  std::string headline() const;
};

// Throws pipetwin::Error naming the option or file at fault.
std::unique_ptr<Scenario> build_scenario(const ScenarioOptions& o);

// What a trace records of its configuration, so that it stands alone for
// compare and calibrate: describe(), the model spec's text, the hardware
// (preset name or file text), and the IR's predicted stash bytes per stage.
nlohmann::json trace_metadata(const Scenario& scenario, const ScenarioOptions& o);
// The same from an already loaded model (in topological order) and hardware;
// `validate` runs the schedule validator (generated schedules are valid by
// construction, which the tests check over the whole generator grid).
std::unique_ptr<Scenario> build_scenario(const models::Model& model, const models::Hardware& hardware,
                                         const ScenarioOptions& o, bool validate);

enum class Engine { Auto, SimGrid, Fast };
Engine parse_engine(const std::string& name);

struct Prediction {
  schedule::Timeline timeline;
  std::string engine;  // "fast" or "simgrid"
  std::string why;     // why that engine answered
};

// Fast: the timed evaluator (exact without contention). SimGrid: the replay.
// Auto: the evaluator when the configuration provably has no contention,
// otherwise SimGrid.
Prediction predict(const Scenario& scenario, Engine engine);

}  // namespace pipetwin::cli
