// The options that name one pipeline configuration (model, hardware,
// schedule, K, M, V, batch, recompute, partition, optimizer), shared by the
// commands that simulate or run it; twin::build_scenario builds it.
#pragma once

#include <CLI/CLI.hpp>

#include "twin/scenario.hpp"

namespace pipetwin::cli {

void add_scenario_options(CLI::App* cmd, twin::ScenarioSpec& o);

// --zero N (ZeRO's stage, 0 to 3), --zero1 (a spelling of --zero 1) and
// --reshard-after-forward on|off (ZeRO-3), their help led by `where`.
void add_zero_options(CLI::App* cmd, int& zero, bool& reshard_after_forward, const std::string& where);

// --reshard-after-forward on|off (ZeRO-3), its help led by `where`.
void add_reshard_option(CLI::App* cmd, bool& reshard_after_forward, const std::string& where);

// -c/--context C and --context-attention ring|all-gather (ScenarioSpec's).
void add_context_options(CLI::App* cmd, int& context, std::string& attention);
// -e/--expert E and --expert-tensor ETP (ScenarioSpec::expert_parallel, expert_tensor_parallel).
void add_expert_option(CLI::App* cmd, int& expert, int& expert_tensor);

// --precision bf16|fp16|fp8 (ScenarioSpec::precision), its help led by `where`.
void add_precision_option(CLI::App* cmd, std::string& precision, const std::string& where);

// --schedule: a generator's name or a schedule file.
CLI::Validator schedule_check();

}  // namespace pipetwin::cli
