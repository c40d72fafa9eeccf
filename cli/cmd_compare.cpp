// `pipetwin compare`: a predicted trace against a measured one, action by action.
#include <cstdio>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "twin/compare.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::CompareRequest request;
  bool json = false;
};

}  // namespace

Run add_compare_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare a predicted trace (simulate --trace) with a measured one (run --trace): step time, bubble, busy time per "
      "rank, durations per kind of action, the largest mispredictions and the peak stash per stage");
  cmd->add_option("predicted", o->request.predicted, "Predicted Chrome trace (pipetwin simulate --trace)")->required();
  cmd->add_option("measured", o->request.measured, "Measured Chrome trace (pipetwin run --trace)")->required();
  cmd->add_option("--schedule", o->request.schedule,
                  "A schedule file (pipetwin text or JSON, PyTorch CSV) both traces must have run: their compute and "
                  "optimizer actions checked, rank by rank, against it");
  cmd->add_option("--repeats", o->request.repeats,
                  "Other runs of the measured configuration (pipetwin run --trace): their spread bounds the "
                  "measurement's noise from run to run, which one run's steps do not show");
  cmd->add_flag("--json", o->json, "Machine-readable report");
  return [o] {
    std::vector<std::string> notes;
    const auto c = twin::compare_files(o->request, &notes);
    if (!o->request.schedule.empty()) print_notes(o->request.schedule, notes);
    if (o->json) {
      std::printf("%s\n", c.to_json().dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s", c.to_text().c_str());
    }
    return 0;
  };
}

}  // namespace pipetwin::cli
