// `pipetwin compare`: a predicted trace against a measured one, action by action.
#include <cstdio>

#include "calibration/compare.hpp"
#include "cli/commands.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  std::string predicted, measured;
  bool json = false;
};

}  // namespace

Run add_compare_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare a predicted trace (simulate --trace) with a measured one (run --trace): step time, bubble, busy time per "
      "rank, durations per kind of action, the largest mispredictions and the peak stash per stage");
  cmd->add_option("predicted", o->predicted, "Predicted Chrome trace (pipetwin simulate --trace)")->required();
  cmd->add_option("measured", o->measured, "Measured Chrome trace (pipetwin run --trace)")->required();
  cmd->add_flag("--json", o->json, "Machine-readable report");
  return [o] {
    const auto c = calibration::compare_files(o->predicted, o->measured);
    if (o->json) {
      std::printf("%s\n", c.to_json().dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s", c.to_text().c_str());
    }
    return 0;
  };
}

}  // namespace pipetwin::cli
