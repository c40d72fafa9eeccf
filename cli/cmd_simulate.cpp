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
#include "twin/own_costs.hpp"
#include "twin/predict.hpp"
#include "schedule/error.hpp"
#include "models/cost_table.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::ScenarioSpec scenario;
  std::string trace, engine = "auto", costs;
  bool json = false;
};

void write_trace(const std::string& path, const schedule::Timeline& timeline, nlohmann::json metadata,
                 const std::vector<std::vector<models::MemorySample>>& memory, const schedule::Program& program) {
  schedule::Trace trace{timeline, std::move(metadata), {}};
  for (int s = 0; s < static_cast<int>(memory.size()); ++s) {
    for (const auto& m : memory[s]) {
      trace.counters.push_back({"stage " + std::to_string(s) + " memory (GB)", program.rank_of(schedule::StageId{s}).value,
                                m.time, m.bytes / 1e9});
    }
  }
  schedule::write_chrome_trace(path, trace);
}

// What simulate prints: with --json `j` and the summary, else the headline,
// the summary and why the engine answered.
void print_result(const Options& o, nlohmann::json j, const std::string& headline, const models::RunSummary& summary,
                  const std::string& why) {
  if (o.json) {
    j["summary"] = summary.to_json();
    j["engine_reason"] = why;
    std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::printf("%s\n%s", headline.c_str(), summary.to_text().c_str());
  std::printf("engine       %s: %s\n", summary.engine.c_str(), why.c_str());
  if (!o.trace.empty()) std::printf("trace        %s (Chrome trace: open in Perfetto)\n", o.trace.c_str());
}

// --costs: the schedule on the user's own cost table.
int run_costs(const Options& o) {
  const auto sc = twin::build_costs_scenario(o.scenario, models::read_cost_table(o.costs));
  print_notes(o.scenario.schedule, sc->notes);
  const auto result = twin::predict(*sc, twin::parse_engine(o.engine));
  const auto summary = twin::summarize(*sc, result);
  if (!o.trace.empty()) {
    const nlohmann::json meta{{"producer", "pipetwin simulate --costs"}, {"costs", o.costs},
                              {"schedule", sc->program.schedule}, {"summary", summary.to_json()}};
    write_trace(o.trace, result.timeline, meta, models::memory_over_time(result.timeline, sc->program, *sc->memory),
                sc->program);
  }
  nlohmann::json j{{"costs", o.costs}, {"schedule", sc->program.schedule}, {"ranks", sc->program.num_ranks},
                   {"microbatches", sc->program.num_microbatches}, {"virtual", sc->program.stages_per_rank}};
  print_result(o, std::move(j), sc->headline(), summary, result.why);
  return 0;
}

int run(const Options& o) {
  if (!o.costs.empty()) return run_costs(o);
  if (o.scenario.model.empty() || o.scenario.hardware.empty()) {
    throw Error("simulate needs --model and --hardware, or --costs FILE (your own per-stage costs)");
  }
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
    write_trace(o.trace, result.timeline, meta.to_json(), models::memory_over_time(result.timeline, sc->program, *sc->costs),
                sc->program);
  }
  auto j = sc->describe();
  j["simulated_actions"] = sc->program.num_actions();
  j["wall_s"] = wall;
  print_result(o, std::move(j), sc->headline(), summary, result.why);
  return 0;
}

}  // namespace

Run add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("simulate", "Predict step time, bubble and memory of one configuration in SimGrid");
  add_scenario_options(cmd, o->scenario);
  // Either a model on a hardware, or the user's own costs (a hardware optional: its network and memory).
  cmd->get_option("--model")->required(false);
  cmd->get_option("--hardware")->required(false)->description(
      "Hardware preset name or YAML file (with --costs: optional, the network between the ranks and the devices' memory)");
  cmd->add_option("--costs", o->costs,
                  "Your own costs in place of --model: a YAML, JSON or CSV table of each stage's seconds (forward_s, "
                  "backward_s or input_grad_s and weight_grad_s, ...) and bytes (docs/formats.md, 'Cost tables')")
      ->check(CLI::ExistingFile)
      ->excludes("--model");
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
