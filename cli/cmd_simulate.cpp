// `pipetwin simulate`: predict one configuration's step in SimGrid.
#include <chrono>
#include <cstdio>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "models/collectives.hpp"
#include "twin/engine.hpp"
#include "cli/scenario_options.hpp"
#include "models/summary.hpp"
#include "schedule/trace.hpp"
#include "twin/predict.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::ScenarioSpec scenario;
  std::string trace, engine = "auto";
  bool json = false;
};

int run(const Options& o) {
  const auto sc = twin::build_scenario(o.scenario);
  print_notes(o.scenario.schedule, sc->notes);
  print_notes("hardware", sc->hardware_notes);
  const auto t0 = std::chrono::steady_clock::now();
  const auto result = twin::predict(*sc, twin::parse_engine(o.engine));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto summary = twin::summarize(*sc, result);
  if (!o.trace.empty()) {
    auto meta = twin::trace_metadata(*sc, o.scenario, "pipetwin simulate");
    meta.sections = {{"summary", summary.to_json()}, {"engine_reason", result.why}};
    schedule::Trace trace{result.timeline, meta.to_json(), {}};
    const auto memory = models::memory_over_time(result.timeline, sc->program, *sc->costs);
    for (int s = 0; s < static_cast<int>(memory.size()); ++s) {
      for (const auto& m : memory[s]) {
        trace.counters.push_back({"stage " + std::to_string(s) + " memory (GB)", sc->program.rank_of(schedule::StageId{s}).value,
                                  m.time, m.bytes / 1e9});
      }
    }
    schedule::write_chrome_trace(o.trace, trace);
  }
  if (o.json) {
    auto j = sc->describe();
    j["summary"] = summary.to_json();
    j["engine_reason"] = result.why;
    j["simulated_actions"] = sc->program.num_actions();
    j["wall_s"] = wall;
    std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s\n%s", sc->headline().c_str(), summary.to_text().c_str());
    std::printf("engine       %s: %s\n", summary.engine.c_str(), result.why.c_str());
    if (!o.trace.empty()) std::printf("trace        %s (Chrome trace: open in Perfetto)\n", o.trace.c_str());
  }
  return 0;
}

}  // namespace

Run add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("simulate", "Predict step time, bubble and memory of one configuration in SimGrid");
  add_scenario_options(cmd, o->scenario);
  cmd->add_option("--engine", o->engine, "auto (fast path when provably contention-free), simgrid or fast")
      ->check(CLI::IsMember(twin::engine_names()))
      ->capture_default_str();
  cmd->add_option("--collective", o->scenario.collective,
                  "All-reduce algorithm of the data- and tensor-parallel collectives: ring, tree (a binary tree, "
                  "reduce then broadcast, pipelined in chunks), or auto: the faster closed form for each message and "
                  "group (default auto)")
      ->check(CLI::IsMember(models::collective_algorithm_names()));
  cmd->add_option("--trace", o->trace, "Write the predicted timeline as a Chrome trace (JSON)");
  cmd->add_flag("--json", o->json, "Machine-readable summary");
  return [o] { return run(*o); };
}

}  // namespace pipetwin::cli
