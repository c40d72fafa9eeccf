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
Run add_plan_command(CLI::App& app);
Run add_merge_command(CLI::App& app);
Run add_run_command(CLI::App& app);
Run add_calibrate_command(CLI::App& app);
Run add_compare_command(CLI::App& app);
Run add_plot_command(CLI::App& app);
Run add_probe_command(CLI::App& app);

// CLI::PositiveNumber's refusal reads "Value 0 not in range 0.000000 to 1797...
// (309 digits)"; this one says "must be positive, got 0".
inline const CLI::Validator kPositive(
    [](std::string& value) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(value, v)) return "expected a positive number, got '" + value + "'";
      if (!(v > 0)) return "must be positive, got " + value;
      return {};
    },
    "POSITIVE", "POSITIVE");

// A recompute choice (models/recompute.hpp): none, full, except-last,
// selective, uniform[:N], block:N; a refusal names the valid spellings.
extern const CLI::Validator kRecomputeChoice;

// An option's allowed values: `first` (a spelling the option adds, such as
// auto), then those of an enum's name table.
inline std::vector<std::string> prepend(std::string first, std::vector<std::string> names) {
  names.insert(names.begin(), std::move(first));
  return names;
}

// The process's own arguments (main's argv), for commands that start copies of it.
void set_command_line(int argc, char** argv);
const std::vector<std::string>& command_line();

}  // namespace pipetwin::cli
