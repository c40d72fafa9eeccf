// predict: the engine choice, then the engine.
#include "twin/predict.hpp"

#include "models/contention.hpp"
#include "models/stage_table.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::twin {

Engine parse_engine(std::string_view name) {
  if (name == "auto") return Engine::Auto;
  if (name == "simgrid") return Engine::SimGrid;
  if (name == "fast") return Engine::Fast;
  throw Error("unknown engine '" + std::string(name) + "' (valid: auto, simgrid, fast)");
}

std::string_view engine_name(Engine engine) {
  switch (engine) {
    case Engine::Auto: return "auto";
    case Engine::SimGrid: return "simgrid";
    case Engine::Fast: return "fast";
  }
  return "?";
}

void check_fast_engine(const schedule::Program& program) {
  if (program.data_parallel <= 1) return;
  // Its evaluator has no network: REDUCE_GRAD would take no time.
  throw Error("--engine fast cannot predict D = " + std::to_string(program.data_parallel) +
              ": the data-parallel gradient reductions (REDUCE_GRAD) are messages on the network, which the fast "
              "evaluator does not model (they would take no time); use --engine simgrid or auto");
}

Prediction predict(const Scenario& sc, Engine engine) {
  const auto table = models::stage_table(*sc.costs, sc.hardware, sc.program);
  if (engine == Engine::SimGrid) {
    return {sim::simulate({sc.program, table, sc.hardware.topology}).timeline, Engine::SimGrid, "asked for (--engine simgrid)"};
  }
  if (engine == Engine::Fast) check_fast_engine(sc.program);
  auto fast = schedule::evaluate(sc.program, table);
  if (fast.deadlocked()) throw Error("evaluation: deadlock at rank " + std::to_string(fast.blocked.front().rank.value));
  const auto check = models::check_contention(fast.timeline, sc.program, table, sc.hardware.topology);
  if (engine == Engine::Fast) {
    return {std::move(fast.timeline), Engine::Fast,
            check.contention_free ? check.reason : "asked for (--engine fast); it ignores contention: " + check.reason};
  }
  if (check.contention_free) return {std::move(fast.timeline), Engine::Fast, check.reason};
  return {sim::simulate({sc.program, table, sc.hardware.topology}).timeline, Engine::SimGrid, "contention: " + check.reason};
}

}  // namespace pipetwin::twin
