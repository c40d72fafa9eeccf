// engine: the one place where a Scenario's engine is chosen.
//
//   asked simgrid ----------------------------------------------> SimGrid
//   asked fast    -> D > 1? refused -> evaluate -> deadlock? error -> Fast
//   asked auto    ------------------> evaluate -> deadlock? error
//                                        -> contention-free? -> Fast
//                                        -> otherwise       -> SimGrid
//
// The fast path is the timed evaluator (schedule/dry_run): exact where the
// configuration provably has no contention (models/contention). SimGrid (sim/)
// replays the Program with the network's messages, in a child process
// (twin/simgrid_pool.hpp keeps several in flight). predict, sweep, plan and
// the calibration's replays all choose here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/topology.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/timeline.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::sim {
struct SimInput;
}

namespace pipetwin::twin {

enum class Engine { Auto, SimGrid, Fast };
Engine parse_engine(std::string_view name);  // "auto", "simgrid", "fast"; throws pipetwin::Error
std::string_view engine_name(Engine engine);
const std::vector<std::string>& engine_names();  // the allowed values, for option lists

struct EngineChoice {
  Engine engine = Engine::Fast;  // the one that answers: Fast or SimGrid
  std::string why;               // why that engine
  // The evaluator's timeline: the answer where engine is Fast; where SimGrid
  // must answer after an evaluation (contention), an estimate that leaves the
  // contention and the data-parallel reductions' time out (plan adds the
  // reductions in closed form, twin/plan_bound.cpp, and ranks by that);
  // empty where SimGrid was asked for.
  schedule::Timeline timeline;
  std::vector<schedule::StageCosts> table;    // the scenario's stage table, which SimGrid replays
};

// Throws pipetwin::Error on a deadlock (naming the rank) or where fast is
// asked for and cannot answer; models::OutOfMemory passes through.
EngineChoice choose_engine(const Scenario& scenario, Engine asked);
// The same for a Program and its stage table (a cost table's), on
// `topology`; without one (null) nothing contends, the transfers take their
// table's flight times, and SimGrid, which needs a network, is refused.
EngineChoice choose_engine(const schedule::Program& program, std::vector<schedule::StageCosts> table,
                           const models::Topology* topology, Engine asked);

// What SimGrid replays for a choice of SimGrid (its table moved out).
sim::SimInput simgrid_input(const Scenario& scenario, EngineChoice& choice);

}  // namespace pipetwin::twin
