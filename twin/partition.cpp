// partition_report: the request from the options, the chosen method, the others.
#include "twin/partition.hpp"

#include "models/layer_graph.hpp"
#include "schedule/error.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::twin {

PartitionReport partition_report(const PartitionSpec& o) {
  PartitionReport r;
  r.model = models::load_model(o.model);
  r.hardware = models::load_hardware(o.hardware);
  ScenarioSpec spec;
  spec.schedule = o.schedule;
  spec.ranks = o.ranks;
  spec.virtual_stages = o.virtual_stages;
  spec.microbatches = o.microbatches > 0 || is_schedule_file(o.schedule) ? o.microbatches : 1;
  spec.recompute = o.recompute;
  r.request.program = scenario_program(models::in_topological_order(r.model), spec);
  r.request.microbatch_size = o.microbatch_size;
  r.request.optimizer = models::parse_optimizer(o.optimizer);
  r.method = models::parse_method(o.method);
  r.chosen = models::partition_model(r.model, r.hardware, r.request, r.method);
  for (const auto m : {models::Method::Optimal, models::Method::Uniform, models::Method::Parameters}) {
    if (m == r.method) continue;
    try {
      r.others.push_back(models::partition_model(r.model, r.hardware, r.request, m));
    } catch (const Error&) {  // no other method fits either: nothing to compare with
    }
  }
  return r;
}

}  // namespace pipetwin::twin
