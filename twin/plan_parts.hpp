// What twin/plan.cpp, plan_run.cpp and plan_csv.cpp share: the enumeration,
// a candidate's scenario and its figures from a timeline.
#pragma once

#include <string>
#include <vector>

#include "models/families.hpp"
#include "schedule/dry_run.hpp"
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

// The evaluator's timeline of a candidate with D > 1 (which leaves the
// data-parallel reductions untimed), each rank's reductions timed in closed
// form from its stage table: a stage's REDUCE_GRAD runs asynchronously from
// its last backward for the collective's time alone on data_group_link
// (models/collectives: the ring or tree all-reduce the stage costs chose,
// ZeRO-1's ring reduce-scatter), its STEP waits for it, and ZeRO-1's
// all-gather lengthens the STEP; every later action of the rank moves by as
// much. No contention, and no wait it causes on other ranks: still an upper
// bound on throughput (SimGrid's replay only falls below it), but one that
// counts every replica's reduction, so that a candidate whose reduction is
// exposed (K = 1 with many replicas) does not rank above timed ones.
schedule::Timeline with_reductions(const Scenario& sc, const std::vector<schedule::StageCosts>& table,
                                   schedule::Timeline timeline);

// The description's hash: what shards of one plan share.
std::string plan_fingerprint(const std::string& description);

}  // namespace pipetwin::twin
