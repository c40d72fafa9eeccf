// choose_engine: the engine choice, and the names of the engines.
#include "twin/engine.hpp"

#include "models/contention.hpp"
#include "models/stage_table.hpp"
#include "schedule/error.hpp"
#include "schedule/names.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::twin {
namespace {
constexpr schedule::NameTable<Engine, 3> kEngines{
    "engine", {{{Engine::Auto, "auto"}, {Engine::SimGrid, "simgrid"}, {Engine::Fast, "fast"}}}};

// Where the fast engine cannot answer when asked for: D > 1 (the reductions
// are network messages).
void check_fast_engine(const schedule::Program& program) {
  if (program.data_parallel <= 1) return;
  // Its evaluator has no network: REDUCE_GRAD would take no time.
  throw Error("--engine fast cannot predict D = " + std::to_string(program.data_parallel) +
              ": the data-parallel gradient reductions (REDUCE_GRAD) are messages on the network, which the fast "
              "evaluator does not model (they would take no time); use --engine simgrid or auto");
}

}  // namespace

Engine parse_engine(std::string_view name) { return kEngines.parse(name); }
std::string_view engine_name(Engine engine) { return kEngines.name(engine); }
const std::vector<std::string>& engine_names() {
  static const auto names = kEngines.names();
  return names;
}

namespace {

// Where the replay keeps the experts' all-to-alls as their closed forms
// (more messages than sim::kMaxExchangeSends): why, for the engine's reason.
std::string exchanges_kept(const schedule::Program& program, const std::vector<schedule::StageCosts>& table,
                           const models::Topology& topology) {
  const auto sends = sim::exchange_sends(program, table, topology);
  if (sends <= sim::kMaxExchangeSends) return "";
  return "; the experts' all-to-alls as their closed forms inside the actions, not as messages (" + std::to_string(sends) +
         " sends a step, more than the replay's " + std::to_string(sim::kMaxExchangeSends) + ")";
}

}  // namespace

EngineChoice choose_engine(const Scenario& sc, Engine asked) {
  return choose_engine(sc.program, models::stage_table(*sc.costs, sc.hardware, sc.program), &sc.hardware.topology, asked);
}

EngineChoice choose_engine(const schedule::Program& program, std::vector<schedule::StageCosts> table,
                           const models::Topology* topology, Engine asked) {
  EngineChoice c;
  c.table = std::move(table);
  if (asked == Engine::SimGrid) {
    if (topology == nullptr) throw Error("--engine simgrid replays the transfers on a network: give --hardware");
    c.engine = Engine::SimGrid;
    c.why = "asked for (--engine simgrid)" + exchanges_kept(program, c.table, *topology);
    return c;
  }
  if (asked == Engine::Fast) check_fast_engine(program);
  auto fast = schedule::evaluate(program, c.table);
  if (fast.deadlocked()) throw Error("evaluation: deadlock at rank " + std::to_string(fast.blocked.front().rank.value));
  const auto check = topology != nullptr
                         ? models::check_contention(fast.timeline, program, c.table, *topology)
                         : models::ContentionCheck{true, "no network given: each transfer takes its own flight time"};
  c.timeline = std::move(fast.timeline);
  if (asked == Engine::Fast) {
    c.engine = Engine::Fast;
    c.why = check.contention_free ? check.reason : "asked for (--engine fast); it ignores contention: " + check.reason;
  } else if (check.contention_free) {
    c.engine = Engine::Fast;
    c.why = check.reason;
  } else {
    c.engine = Engine::SimGrid;
    c.why = "contention: " + check.reason + exchanges_kept(program, c.table, *topology);
  }
  return c;
}

sim::SimInput simgrid_input(const Scenario& sc, EngineChoice& choice) {
  return {sc.program, std::move(choice.table), sc.hardware.topology};
}

}  // namespace pipetwin::twin
