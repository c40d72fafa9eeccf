// For the calibration tests: traces made by the simulator from a known
// hardware, standing alone as `pipetwin run` traces do (their otherData).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "models/yaml_file.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/trace.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::test {

inline const std::string kModel =
    "family: transformer\nname: transformer-small\nlayers: 4\nd_model: 128\nd_ff: 512\nheads: 4\nseq_len: 64\n"
    "vocab: 1000\nprecision: fp32\n";

// A device whose every calibrated field differs from its default.
inline models::Hardware known_hardware() {
  models::Hardware h = models::preset("cpu");
  h.name = "known";
  h.topology.host_cores = 8;  // nothing shared: the traces are exact critical paths
  h.topology.intra = {42e-6, 2.5e9};
  models::Device& d = h.device;
  d.op_overhead_s = 0;
  d.transfer_overhead_s = 17e-6;
  d.recv_overhead_s = 23e-6;
  d.send_bandwidth = 0.8e9;
  d.recv_bandwidth = 1.5e9;
  d.memory_bandwidth = 7.5e9;
  d.step_overhead_s = 230e-6;
  d.cold_weights_bandwidth = 9e9;
  d.action_overhead = {31e-6, 55e-6, 12e-6, 40e-6};
  // A recompute is the forward with autograd again: the forward's curves
  // (recompute unset), with a cost per action of its own.
  d.kinds["transformer_block"] = {{0.45, 3e6, {}}, {0.38, 5e6, {}}, models::Efficiency{0.52, 2e6, {}}, std::nullopt, false, std::nullopt};
  d.kinds["lm_head"] = {{0.61, 1e6, {}}, {0.55, 7e5, {}}, models::Efficiency{0.66, 9e5, {}}, std::nullopt, false, std::nullopt};
  d.kinds["embedding"] = {{0.02, 4e4, {}}, {0.01, 9e4, {}}, models::Efficiency{0.03, 3e4, {}}, std::nullopt, false, std::nullopt};
  return h;
}

// The timed evaluator's timeline of one configuration of `model_spec` (kModel) on `hw`
// (SimGrid's with `simgrid`), as a trace that stands alone.
// With `tensor_parallel` T > 1 (SimGrid's): tensor groups of T processes.
// With `data_parallel` D > 1 (SimGrid's, always): D replicas of the pipeline,
// each stage's gradients all-reduced over them (REDUCE_GRAD; with `zero1`
// reduce-scattered, the weights all-gathered in STEP), the batch per replica;
// otherData.program records the Program (D with it).
inline schedule::Trace synthetic_trace(const std::string& schedule_name, int microbatches, int batch,
                                       const std::string& recompute, const std::vector<schedule::LayerRange>& partition,
                                       const models::Hardware& hw, bool simgrid = false, int data_parallel = 1,
                                       bool zero1 = false, int tensor_parallel = 1,
                                       const std::string& model_spec = kModel) {
  const models::Model model =
      models::model_from_yaml(models::YamlFields(models::parse_yaml(model_spec, "model"), "model"));
  const int ranks = static_cast<int>(partition.size());
  schedule::Program p =
      schedule::build_schedule(schedule_name, {ranks, microbatches, 1, schedule::parse_recompute(recompute)});
  if (data_parallel > 1 || tensor_parallel > 1) {
    p.tensor_parallel = tensor_parallel;
    p.data_parallel = data_parallel;
    p.zero = zero1 ? 1 : 0;
    p = schedule::insert_gradient_reductions(std::move(p));
    simgrid = true;
  }
  p.partition = partition;
  models::PartitionRequest r;
  r.program = p;
  r.microbatch_size = batch / (microbatches * data_parallel);  // each replica takes its share of the batch
  const models::StageCostModel costs(model, hw, r);
  const auto table = models::stage_table(costs, hw, p);
  const schedule::Timeline timeline =
      simgrid ? sim::simulate({p, table, hw.topology}).timeline : schedule::evaluate(p, table).timeline;
  nlohmann::json ranges = nlohmann::json::array();
  for (const auto& range : partition) ranges.push_back({range.begin, range.end});
  nlohmann::json meta{{"producer", "test"},          {"model", model.name},  {"model_spec", model_spec},
                      {"schedule", schedule_name},   {"ranks", ranks},       {"stages_per_rank", 1},
                      {"microbatches", microbatches}, {"microbatch_size", r.microbatch_size},
                      {"batch", batch},              {"recompute", recompute}, {"partition", ranges}};
  if (data_parallel > 1 || tensor_parallel > 1) meta["program"] = schedule::to_text(p);
  return {timeline, meta, {}};
}

}  // namespace pipetwin::test
