// `pipetwin compare`: a predicted trace against a measured one, action by action.
#include <cstdio>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "schedule/error.hpp"
#include "twin/compare.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::CompareRequest request;
  twin::CostsCompareRequest costs;
  bool json = false;
};

}  // namespace

Run add_compare_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "compare",
      "Compare a predicted trace (simulate --trace) with a measured one (run --trace): step time, bubble, busy time per "
      "rank, durations per kind of action, the largest mispredictions and the peak stash per stage");
  cmd->add_option("predicted", o->request.predicted,
                  "Predicted Chrome trace (pipetwin simulate --trace); with --costs, the measured torch.profiler run "
                  "(a folder of one trace per rank) alone");
  cmd->add_option("measured", o->request.measured, "Measured Chrome trace (pipetwin run --trace)");
  cmd->add_option("--costs", o->costs.costs,
                  "A cost table (calibrate from torch.profiler traces writes one): predict the torch.profiler run "
                  "given with it, in its own order of actions, and compare");
  cmd->add_option("--batch", o->costs.batch, "With --costs: the samples of the run's step (micro-batches of batch / M)")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--traces", o->costs.traces,
                  "With --costs: write PREFIX.predicted.json and PREFIX.measured.json (pipetwin plot gantt reads them)");
  cmd->add_option("--schedule", o->request.schedule,
                  "A schedule file (pipetwin text or JSON, PyTorch CSV) both traces must have run: their compute and "
                  "optimizer actions checked, rank by rank, against it");
  cmd->add_option("--repeats", o->request.repeats,
                  "Other runs of the measured configuration (pipetwin run --trace): their spread bounds the "
                  "measurement's noise from run to run, which one run's steps do not show");
  cmd->add_flag("--json", o->json, "Machine-readable report");
  cmd->callback([o] {
    const bool costs = !o->costs.costs.empty();
    if (o->request.predicted.empty()) throw CLI::RequiredError(costs ? "run" : "predicted");
    if (!costs && o->request.measured.empty()) throw CLI::RequiredError("measured");
  });
  return [o] {
    if (!o->costs.costs.empty()) {
      if (!o->request.measured.empty() || !o->request.schedule.empty()) {
        throw Error("--costs compares one torch.profiler run with its prediction: give the run alone, without --schedule");
      }
      o->costs.measured = o->request.predicted;
      o->costs.repeats = o->request.repeats;
      const auto c = twin::compare_costs(o->costs);
      std::printf("%s", o->json ? (c.to_json().dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str()
                                : c.to_text().c_str());
      if (!o->costs.traces.empty() && !o->json) {
        std::printf("wrote %s.predicted.json and %s.measured.json\n", o->costs.traces.c_str(), o->costs.traces.c_str());
      }
      return 0;
    }
    if (o->costs.batch > 0 || !o->costs.traces.empty()) throw Error("--batch and --traces go with --costs");
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
