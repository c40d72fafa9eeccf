// The options that name one pipeline configuration (model, hardware,
// schedule, K, M, V, batch, recompute, partition, optimizer), shared by the
// commands that simulate or run it; twin::build_scenario builds it.
#pragma once

#include <CLI/CLI.hpp>

#include "twin/scenario.hpp"

namespace pipetwin::cli {

void add_scenario_options(CLI::App* cmd, twin::ScenarioSpec& o);

// --schedule: a generator's name or a schedule file.
CLI::Validator schedule_check();

}  // namespace pipetwin::cli
