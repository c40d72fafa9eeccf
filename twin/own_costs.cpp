// The own-costs scenario: a Program from the options, the table's stage costs.
#include "twin/own_costs.hpp"

#include <cstdio>

#include "schedule/error.hpp"
#include "schedule/passes.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::twin {

std::unique_ptr<CostsScenario> build_costs_scenario(const ScenarioSpec& spec, models::CostTable table) {
  if (!spec.model.empty()) throw Error("--costs replaces --model: give one of them");
  if (spec.tensor_parallel > 1 || spec.data_parallel > 1 || spec.sequence_parallel || spec.zero > 0) {
    throw Error("--costs: a cost table times one pipeline; --tensor, --data, --sequence-parallel and --zero need --model");
  }
  if (!spec.partition.empty()) throw Error("--costs: the table's rows are the stages; --partition needs --model");
  if (spec.grad_bucket_mb > 0) throw Error("--costs: --grad-bucket-mb needs --data D > 1, which needs --model");
  std::vector<std::string> notes;
  auto program = scenario_program(
      spec, [&](std::int64_t stages) { table.check_stages(static_cast<int>(std::min<std::int64_t>(stages, 1 << 30))); },
      &notes);
  // --batch B: micro-batches of B / M samples, the table moved there along its per-sample times.
  if (spec.batch > 0) table = table.for_batch(spec.batch, program.num_microbatches);
  auto sc = costs_scenario(std::move(program), std::move(table), spec.hardware);
  sc->notes = std::move(notes);
  return sc;
}

std::unique_ptr<CostsScenario> costs_scenario(schedule::Program program, models::CostTable table, const std::string& hardware) {
  auto sc = std::make_unique<CostsScenario>();
  sc->table = std::move(table);
  sc->program = schedule::insert_gradient_reductions(schedule::lower(std::move(program)));
  schedule::validate(sc->program);
  if (!hardware.empty()) sc->hardware = models::load_hardware(hardware);
  const models::Hardware* hw = sc->hardware ? &*sc->hardware : nullptr;
  sc->stages = models::cost_table_stages(sc->table, sc->program, hw);
  sc->memory = std::make_unique<models::CostTableMemory>(sc->table, sc->program, hw);
  sc->samples = sc->program.num_microbatches * sc->table.samples_per_microbatch;
  return sc;
}

Prediction predict(const CostsScenario& sc, Engine engine) {
  const models::Topology* topology = sc.hardware ? &sc.hardware->topology : nullptr;
  auto choice = choose_engine(sc.program, sc.stages, topology, engine);
  if (topology == nullptr) {
    choice.why = sc.table.link_bandwidth ? "the table's link between each pair of neighbouring stages: nothing is shared"
                                         : "no link and no hardware given: transfers take no time";
  }
  if (choice.engine == Engine::Fast) return {std::move(choice.timeline), Engine::Fast, std::move(choice.why)};
  return {sim::simulate({sc.program, std::move(choice.table), *topology}).timeline, Engine::SimGrid, std::move(choice.why)};
}

models::RunSummary summarize(const CostsScenario& sc, const Prediction& p) {
  const std::string engine = p.engine == Engine::SimGrid ? "simgrid " + simgrid_version() : "fast critical path";
  return models::summarize(p.timeline, sc.samples, *sc.memory, engine, &sc.program);
}

std::string CostsScenario::headline() const {
  char line[2048];
  std::snprintf(line, sizeof line, "own costs %s%s%s, %s, K=%d V=%d M=%d, %g samples per step, recompute %s",
                table.source.c_str(), hardware ? " on " : "", hardware ? hardware->name.c_str() : "",
                program.schedule.c_str(), program.num_ranks, program.stages_per_rank, program.num_microbatches, samples,
                std::string(schedule::recompute_name(program.recompute)).c_str());
  return line;
}

}  // namespace pipetwin::twin
