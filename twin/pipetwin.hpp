// pipetwin.hpp: the twin library's public header, for programs that predict
// pipeline-parallel training without the command line. Installed by
// `cmake --install build --prefix P` with libpipetwin.so; a CMake project
// finds both with find_package(pipetwin) and links pipetwin::pipetwin.
//
//   namespace pt = pipetwin::twin;
//   pt::ScenarioSpec spec;                         // what names one configuration
//   spec.model = "llama.yaml"; spec.hardware = "a100-80gb"; spec.schedule = "1f1b";
//   spec.ranks = 4; spec.microbatches = 8;
//   auto scenario = pt::build_scenario(spec);     // Program and costs, built once
//   auto prediction = pt::predict(*scenario, pt::Engine::Auto);
//   auto summary = pt::summarize(*scenario, prediction);  // step, bubble, memory per stage
//
// Sweeps and plans stream their results as they are computed: run_sweep's
// SweepRowCallback, run_plan's PlanObserver, each with a progress callback.
// Errors are pipetwin::Error, naming the file, field, rank or step at fault.
// examples/library/ is a complete program.
#pragma once

#include <string_view>

#include "models/summary.hpp"
#include "schedule/error.hpp"
#include "schedule/program.hpp"
#include "twin/engine.hpp"
#include "twin/plan.hpp"
#include "twin/predict.hpp"
#include "twin/scenario.hpp"
#include "twin/sweep.hpp"

namespace pipetwin::twin {

// The library's version (the project's).
std::string_view library_version();

}  // namespace pipetwin::twin
