// What twin/plan.cpp, plan_run.cpp and plan_csv.cpp share: the enumeration,
// a candidate's scenario and its figures from a timeline.
#pragma once

#include <string>
#include <vector>

#include "models/families.hpp"
#include "schedule/timeline.hpp"
#include "twin/plan.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::twin {

// Per sample: the model's forward and backward FLOPs (no recompute: model
// FLOPs), and its tokens (the sequence length; 0 where it has none).
struct ModelRates {
  double flops_per_sample = 0, tokens_per_sample = 0;
};
ModelRates model_rates(const models::Model& model);

// Every candidate, in index order; `model` in topological order.
std::vector<Candidate> enumerate_candidates(const PlanSpec& spec, const models::Model& model, const models::Hardware& hw);
// One line naming the inputs: model and hardware (a file by its contents), N,
// B and the options that change the enumeration or the figures.
std::string describe_plan(const PlanSpec& spec, const models::Model& model);
ScenarioSpec candidate_scenario(const PlanSpec& spec, const Candidate& c);
// The figures of `c` from its timeline; status oom where it does not fit.
void set_figures(Candidate& c, const Scenario& sc, const schedule::Timeline& timeline, const std::string& engine,
                 const ModelRates& rates);

// The description's hash: what shards of one plan share.
std::string plan_fingerprint(const std::string& description);

}  // namespace pipetwin::twin
