// `pipetwin validate FILE`: read a schedule (text, CSV or JSON) and validate it.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "schedule/io.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::cli {
namespace {

namespace ps = pipetwin::schedule;

struct Options {
  std::string file;
  bool json = false;
};

int run(const Options& o) {
  std::vector<std::string> notes;
  const auto program = ps::read_program(o.file, &notes);
  print_notes(o.file, notes);
  const auto report = [&] {
    try {
      return ps::validate(program);
    } catch (const ps::ScheduleError&) {
      throw;  // names rank and step, with the grid
    } catch (const Error& e) {
      throw Error(o.file + ": " + e.what());  // a shape error: the file is what to fix
    }
  }();
  if (o.json) {
    nlohmann::json j;
    j["file"] = o.file;
    j["valid"] = true;
    j["schedule"] = report.program.schedule;
    j["ranks"] = report.program.num_ranks;
    j["stages_per_rank"] = report.program.stages_per_rank;
    j["microbatches"] = report.program.num_microbatches;
    j["actions"] = report.program.num_actions();
    j["transfers_inserted"] = report.lowered;
    j["notes"] = notes;
    j["dry_run_steps"] = report.dry_run.timeline.makespan();
    j["bubble_fraction"] = report.dry_run.timeline.bubble_fraction();
    for (const auto& m : report.memory) {
      j["peak_stashed_microbatches"].push_back(m.peak_in_flight);
      j["weight_versions"].push_back(m.weight_versions);
    }
    std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s: %s\n", o.file.c_str(), report.summary().c_str());
  }
  return 0;
}

}  // namespace

Run add_validate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("validate", "Validate a schedule file (pipetwin text, PyTorch CSV or JSON)");
  cmd->add_option("file", o->file, "Schedule file")->required();
  cmd->add_flag("--json", o->json, "Machine-readable summary");
  return [o] { return run(*o); };
}

}  // namespace pipetwin::cli
