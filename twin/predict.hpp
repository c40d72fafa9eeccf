// predict: one scenario's timeline from the engine that can answer it
// (twin/engine.hpp chooses).
//   fast     the timed evaluator (schedule/dry_run): exact without contention
//   simgrid  the SimGrid replay (sim/), in a child process
//   auto     the evaluator where the configuration provably has no
//            contention (models/contention), otherwise SimGrid
#pragma once

#include <string>

#include "models/summary.hpp"
#include "schedule/timeline.hpp"
#include "twin/engine.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::twin {

struct Prediction {
  schedule::Timeline timeline;
  Engine engine = Engine::Fast;  // the one that answered: Fast or SimGrid
  std::string why;               // why that engine answered
};

Prediction predict(const Scenario& scenario, Engine engine);

// The prediction's figures: step time, throughput, bubble, busy and idle time
// per rank, peak memory per stage and per rank; named by its engine.
models::RunSummary summarize(const Scenario& scenario, const Prediction& prediction);

// The version of the SimGrid library the replays run on.
std::string simgrid_version();

}  // namespace pipetwin::twin
