// Simulating with the user's own costs: a schedule (generator or file) and a
// cost table (models/cost_table.hpp) in place of a model spec, optionally a
// hardware for the network between the ranks and the devices' memory.
// `pipetwin simulate --costs FILE` and the Python package's simulate(costs=).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/cost_table.hpp"
#include "models/summary.hpp"
#include "twin/predict.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::twin {

struct CostsScenario {
  schedule::Program program;                 // complete, validated
  models::CostTable table;
  std::optional<models::Hardware> hardware;  // the network and devices, where given
  std::vector<schedule::StageCosts> stages;  // the engines' stage table
  std::unique_ptr<models::CostTableMemory> memory;
  double samples = 0;                        // per step: M x the table's samples per micro-batch
  std::vector<std::string> notes;            // what reading its schedule file said
  std::string headline() const;
};

// `spec` names the schedule and its shape (K, M, V, recompute; T and D must
// be 1), spec.hardware optionally a hardware; spec.model must be empty.
// Throws pipetwin::Error naming the option, the file or the table's field.
std::unique_ptr<CostsScenario> build_costs_scenario(const ScenarioSpec& spec, models::CostTable table);
// The same for a Program already built (a generator's, a file's, a PyTorch
// schedule's): lowered where it has no transfers, validated; `hardware` a
// preset or a file, or "".
std::unique_ptr<CostsScenario> costs_scenario(schedule::Program program, models::CostTable table,
                                              const std::string& hardware = "");

Prediction predict(const CostsScenario& scenario, Engine engine);
models::RunSummary summarize(const CostsScenario& scenario, const Prediction& prediction);

}  // namespace pipetwin::twin
