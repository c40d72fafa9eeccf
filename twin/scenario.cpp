// build_scenario: load, check, generate, lower, partition, validate.
#include "twin/scenario.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include "models/layer_graph.hpp"
#include "models/stage_table.hpp"
#include "models/partition.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/memory.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::twin {

namespace {

std::vector<schedule::LayerRange> partition_from_file(const std::string& path) {
  const std::string text = schedule::read_file(path);
  if (text.find("rank ") != std::string::npos || text.find('{') != std::string::npos) {
    auto ranges = schedule::read_program(path).partition;
    if (ranges.empty()) throw Error(path + ": this schedule holds no partition line");
    return ranges;
  }
  // Bare "begin:end" ranges, whitespace separated.
  std::vector<schedule::LayerRange> ranges;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    const auto colon = word.find(':');
    try {
      std::size_t used = 0;
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      const int begin = std::stoi(word.substr(0, colon), &used);
      const int end = std::stoi(word.substr(colon + 1));
      ranges.push_back({begin, end});
    } catch (const std::exception&) {
      throw Error(path + ": '" + word + "' is not a layer range begin:end");
    }
  }
  if (ranges.empty()) throw Error(path + ": no layer ranges (expected begin:end per stage)");
  return ranges;
}

}  // namespace

std::unique_ptr<Scenario> build_scenario(const ScenarioSpec& o) {
  return build_scenario(models::in_topological_order(models::load_model(o.model)), models::load_hardware(o.hardware), o,
                        true);
}

std::unique_ptr<Scenario> build_scenario(const models::Model& model, const models::Hardware& hardware,
                                         const ScenarioSpec& o, bool validate) {
  auto sc = std::make_unique<Scenario>();
  sc->model = model;
  sc->hardware = hardware;
  auto& r = sc->request;
  const auto recompute = schedule::parse_recompute(o.recompute);
  r.optimizer = models::parse_optimizer(o.optimizer);
  const int batch = o.batch > 0 ? o.batch : o.microbatches;
  if (batch % o.microbatches != 0) {
    throw Error("--batch " + std::to_string(batch) + " does not split into --microbatches " +
                std::to_string(o.microbatches) + " equal micro-batches");
  }
  r.microbatch_size = batch / o.microbatches;
  sc->samples = batch;

  // Before the schedule is built, which K = 10^6 makes slow.
  if (o.ranks >= 1 && o.virtual_stages >= 1) {
    models::check_stage_count(sc->model, static_cast<std::int64_t>(o.ranks) * o.virtual_stages);
  }
  sc->program = schedule::build_schedule(o.schedule, {o.ranks, o.microbatches, o.virtual_stages, recompute});
  r.program = sc->program;
  const int n = static_cast<int>(sc->model.layers.size());
  if (o.partition == "auto" || o.partition == "optimal" || o.partition == "uniform" || o.partition == "parameters") {
    sc->program.partition = models::partition_model(sc->model, sc->hardware, r, models::parse_method(o.partition)).ranges();
  } else {
    if (!std::filesystem::exists(o.partition)) {
      throw Error("--partition '" + o.partition + "' is neither auto, uniform, parameters nor a file");
    }
    sc->program.partition = partition_from_file(o.partition);
    if (!sc->program.partition.empty() && sc->program.partition.back().end != n) {
      throw Error(o.partition + ": the partition ends at layer " + std::to_string(sc->program.partition.back().end) +
                  " but " + sc->model.name + " has " + std::to_string(n) + " layers");
    }
  }
  if (validate) schedule::validate(sc->program);  // throws with the grid if anything is wrong
  r.program = sc->program;
  sc->costs = std::make_unique<models::StageCostModel>(sc->model, sc->hardware, r);
  return sc;
}

std::unique_ptr<Scenario> scenario_of(const models::Model& model, const models::Hardware& hardware,
                                      schedule::Program program, int microbatch_size, double batch,
                                      models::Optimizer optimizer) {
  auto sc = std::make_unique<Scenario>();
  sc->model = model;
  sc->hardware = hardware;
  sc->program = std::move(program);
  sc->samples = batch;
  auto& r = sc->request;
  r.program = sc->program;
  r.microbatch_size = microbatch_size;
  r.optimizer = optimizer;
  sc->costs = std::make_unique<models::StageCostModel>(sc->model, sc->hardware, r);
  return sc;
}

schedule::TraceMetadata Scenario::configuration() const {
  schedule::TraceMetadata m;
  m.model = model.name;
  m.hardware = hardware.name;
  m.schedule = program.schedule;
  m.ranks = program.num_ranks;
  m.stages_per_rank = program.stages_per_rank;
  m.microbatches = program.num_microbatches;
  m.microbatch_size = request.microbatch_size;
  m.batch = samples;
  m.recompute = std::string(schedule::recompute_name(program.recompute));
  m.partition = program.partition;
  return m;
}

nlohmann::json Scenario::describe() const { return configuration().configuration_json(); }

schedule::TraceMetadata trace_metadata(const Scenario& sc, const ScenarioSpec& o, std::string producer) {
  auto m = sc.configuration();
  m.producer = std::move(producer);
  m.model_spec = schedule::read_file(o.model);
  m.hardware_spec = std::filesystem::exists(o.hardware) ? schedule::read_file(o.hardware) : o.hardware;
  const auto memory = schedule::account_memory(sc.program);
  for (int s = 0; s < sc.program.num_stages(); ++s) {
    const auto [i, j] = sc.program.partition.at(s);
    m.predicted_stash_bytes_per_stage.push_back(
        memory.at(s).peak_bytes(sc.costs->activation_bytes(i, j), sc.costs->input_bytes(i)));
  }
  m.program = schedule::to_text(sc.program);  // what ran: calibrate and compare read it back
  return m;
}

std::string Scenario::headline() const {
  char line[4096];
  std::snprintf(line, sizeof line, "%s on %s (%s), %s, K=%d V=%d M=%d, batch %g, recompute %s",
                model.name.c_str(), hardware.describe_devices(program.num_ranks).c_str(),
                std::string(models::topology_name(hardware.topology.kind)).c_str(), program.schedule.c_str(),
                program.num_ranks, program.stages_per_rank, program.num_microbatches, samples,
                std::string(schedule::recompute_name(program.recompute)).c_str());
  return line;
}

}  // namespace pipetwin::twin
