// The subcommands of the `pipetwin` binary. Each registers its options on the
// CLI11 app and returns the function that runs it (exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace pipetwin::cli {

using Run = std::function<int()>;

Run add_schedule_command(CLI::App& app);
Run add_validate_command(CLI::App& app);
Run add_info_command(CLI::App& app);
Run add_partition_command(CLI::App& app);
Run add_simulate_command(CLI::App& app);
Run add_sweep_command(CLI::App& app);
Run add_run_command(CLI::App& app);
Run add_calibrate_command(CLI::App& app);
Run add_compare_command(CLI::App& app);
Run add_plot_command(CLI::App& app);

// The process's own arguments (main's argv), for commands that start copies of it.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

}  // namespace pipetwin::cli
