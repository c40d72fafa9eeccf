// `pipetwin compare`: a predicted trace against a measured one, action by action.
#include <cstdio>

#include "calibration/compare.hpp"
#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "schedule/io.hpp"
#include "schedule/trace.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  std::string predicted, measured, schedule;
  std::vector<std::string> repeats;
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
  cmd->add_option("--schedule", o->schedule,
                  "A schedule file (pipetwin text or JSON, PyTorch CSV) both traces must have run: their compute and "
                  "optimizer actions checked, rank by rank, against it");
  cmd->add_option("--repeats", o->repeats,
                  "Other runs of the measured configuration (pipetwin run --trace): their spread bounds the "
                  "measurement's noise from run to run, which one run's steps do not show");
  cmd->add_flag("--json", o->json, "Machine-readable report");
  return [o] {
    const auto p = schedule::read_chrome_trace(o->predicted);
    const auto m = schedule::read_chrome_trace(o->measured);
    int checked = 0;
    if (!o->schedule.empty()) {
      std::vector<std::string> notes;
      const auto program = schedule::read_program(o->schedule, &notes);
      print_notes(o->schedule, notes);
      calibration::check_ran_schedule(p, o->predicted, program, o->schedule);
      checked = calibration::check_ran_schedule(m, o->measured, program, o->schedule);
    }
    auto c = calibration::compare(p, o->predicted, m, o->measured);
    if (!o->repeats.empty()) {
      std::vector<schedule::Trace> repeats;
      for (const auto& f : o->repeats) repeats.push_back(schedule::read_chrome_trace(f));
      calibration::add_repeats(c, m, repeats, o->repeats);
    }
    c.schedule_file = o->schedule;
    c.schedule_actions = checked;
    if (o->json) {
      std::printf("%s\n", c.to_json().dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s", c.to_text().c_str());
    }
    return 0;
  };
}

}  // namespace pipetwin::cli
