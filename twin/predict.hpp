// predict: one scenario's timeline from the engine that can answer it.
//   fast     the timed evaluator (schedule/dry_run): exact without contention
//   simgrid  the SimGrid replay (sim/), in a child process
//   auto     the evaluator where the configuration provably has no
//            contention (models/contention), otherwise SimGrid
#pragma once

#include <string>
#include <string_view>

#include "schedule/timeline.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::twin {

enum class Engine { Auto, SimGrid, Fast };
Engine parse_engine(std::string_view name);  // "auto", "simgrid", "fast"; throws pipetwin::Error
std::string_view engine_name(Engine engine);

struct Prediction {
  schedule::Timeline timeline;
  Engine engine = Engine::Fast;  // the one that answered: Fast or SimGrid
  std::string why;               // why that engine answered
};

// Throws pipetwin::Error, naming the reason, where the fast engine cannot
// answer when asked for: D > 1 (the reductions are network messages).
void check_fast_engine(const schedule::Program& program);

Prediction predict(const Scenario& scenario, Engine engine);

}  // namespace pipetwin::twin
