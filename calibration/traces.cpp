// load_trace_run(): one trace read and checked against the configuration it
// records; every refusal names the file. (What a measured run recorded:
// traces_measured.cpp; runs checked against each other: traces_together.cpp.)
#include "calibration/traces.hpp"

#include <algorithm>
#include <map>

#include "calibration/traces_measured.hpp"
#include "models/families.hpp"
#include "models/layer_graph.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/trace_metadata.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
using nlohmann::json;

std::string TraceRun::describe() const {
  return program.schedule + " K=" + std::to_string(program.num_ranks) + " M=" + std::to_string(program.num_microbatches) +
         " mb=" + std::to_string(microbatch_size) + " recompute " + std::string(ps::recompute_name(program.recompute)) +
         (program.tensor_parallel > 1 ? " T=" + std::to_string(program.tensor_parallel) : "") +
         (program.data_parallel > 1 ? " D=" + std::to_string(program.data_parallel) : "") +
         (program.shard_optimizer() ? " ZeRO-1" : "");
}

namespace {

// The partition continues from layer 0 to the model's last layer.
void check_partition(const std::vector<ps::LayerRange>& partition, const std::string& path, int stages, int layers,
                     const std::string& model) {
  const std::string where = path + ": otherData.partition";
  if (static_cast<int>(partition.size()) != stages) {
    throw Error(where + " has " + std::to_string(partition.size()) + " ranges for " + std::to_string(stages) + " stages");
  }
  int next = 0;
  for (std::size_t s = 0; s < partition.size(); ++s) {
    const auto [b, e] = partition[s];
    if (b != next || e <= b || e > layers) {
      throw Error(where + ": stage " + std::to_string(s) + " holds layers " + std::to_string(b) + ":" + std::to_string(e) +
                  ", which does not continue a partition of model " + model + " (" + std::to_string(layers) +
                  " layers; stage " + std::to_string(s) + " must start at layer " + std::to_string(next) + ")");
    }
    next = e;
  }
  if (next != layers) {
    throw Error(where + " ends at layer " + std::to_string(next) + " but model " + model + " has " +
                std::to_string(layers) + " layers");
  }
}

// Every rank holds exactly its actions of the regenerated program.
void check_actions(const TraceRun& run) {
  const auto& timeline = run.trace.timeline;
  const int K = run.program.num_ranks;
  if (static_cast<int>(timeline.ranks.size()) > K) {
    throw Error(run.path + ": events for rank " + std::to_string(timeline.ranks.size() - 1) + ", but its configuration (" +
                run.describe() + ") has " + std::to_string(K) + " ranks");
  }
  for (int r = 0; r < K; ++r) {
    if (r >= static_cast<int>(timeline.ranks.size()) || timeline.ranks[r].empty()) {
      throw Error(run.path + ": rank " + std::to_string(r) + " is missing (no events with pid " + std::to_string(r) +
                  "; its configuration, " + run.describe() + ", has " + std::to_string(K) + " ranks)");
    }
    std::map<std::string, int> seen;
    for (const auto& a : timeline.ranks[r]) ++seen[ps::to_string(a.action)];
    const auto& expected = run.program.ranks[r];
    std::map<std::string, int> want;
    for (const auto& a : expected) ++want[ps::to_string(a)];
    for (const auto& a : expected) {
      const std::string name = ps::to_string(a);
      if (seen[name] == 0) {
        throw Error(run.path + ": rank " + std::to_string(r) + ": action " + name + " is missing (the rank has " +
                    std::to_string(timeline.ranks[r].size()) + " of the " + std::to_string(expected.size()) +
                    " actions that " + run.describe() + " gives it; is the file truncated?)");
      }
    }
    for (const auto& [name, count] : seen) {
      const auto it = want.find(name);
      if (it == want.end()) {
        throw Error(run.path + ": rank " + std::to_string(r) + ": action " + name + " is not in its schedule (" +
                    run.describe() + ")");
      }
      if (count != it->second) {
        throw Error(run.path + ": rank " + std::to_string(r) + ": action " + name + " appears " + std::to_string(count) +
                    " times (once in the schedule): a trace holds one step");
      }
    }
  }
}

// The Program the trace ran: otherData.program (its text form, which run and
// simulate record), checked against the shape the other fields give. A trace
// written before the program was recorded names one of the generators
// instead, which is built again (the only place a name becomes a Program
// below the command line: reading an older file).
ps::Program recorded_program(const ps::TraceMetadata& md, const std::string& path) {
  const std::string& schedule = md.schedule;
  const int K = md.ranks, V = md.stages_per_rank, M = md.microbatches;
  if (!md.program) {
    try {
      return ps::build_schedule(schedule, {K, M, V, ps::parse_recompute(md.recompute)});
    } catch (const Error& e) {
      throw Error(path + ": otherData does not name a schedule pipetwin can regenerate: " + e.what());
    }
  }
  ps::Program p = ps::parse_text(*md.program, path + " (otherData.program)");
  const auto differs = [&](const char* field, const std::string& recorded, const std::string& given) {
    if (recorded != given) {
      throw Error(path + ": otherData.program has " + field + " " + recorded + " but otherData." + field + " is " + given);
    }
  };
  differs("schedule", p.schedule, schedule);
  differs("ranks", std::to_string(p.num_ranks), std::to_string(K));
  differs("stages_per_rank", std::to_string(p.stages_per_rank), std::to_string(V));
  differs("microbatches", std::to_string(p.num_microbatches), std::to_string(M));
  differs("recompute", std::string(ps::recompute_name(p.recompute)), md.recompute);
  ps::validate(p);  // names the rank and step of anything that cannot run
  return p;
}

}  // namespace

TraceRun load_trace_run(const std::string& path) {
  return trace_run_from(ps::read_chrome_trace(path), path);  // names the file when invalid or truncated
}

TraceRun trace_run_from(schedule::Trace trace, const std::string& path) {
  TraceRun run;
  run.path = path;
  run.trace = std::move(trace);
  const json& meta = run.trace.metadata;
  run.noise = Noise::of_trace(meta);
  const ps::TraceMetadata md = ps::read_trace_metadata(meta, path);
  run.model_spec = md.model_spec;
  try {
    // The model file's text: a YAML spec or a Hugging Face config.json.
    run.model = models::in_topological_order(
        models::model_from_text(run.model_spec, path + " (otherData.model_spec)", md.model));
  } catch (const Error& e) {
    const std::string what = e.what();
    throw Error(what.rfind(path, 0) == 0 ? what : path + ": otherData.model_spec: " + what);
  }
  const int K = md.ranks, V = md.stages_per_rank, M = md.microbatches;
  run.microbatch_size = md.microbatch_size;
  // Every stage runs a forward and a backward per micro-batch: a configuration
  // with more of them than the file has events is refused before its Program is
  // regenerated (a huge K x V x M would take minutes and gigabytes to build).
  std::size_t events = 0;
  for (const auto& rank : run.trace.timeline.ranks) events += rank.size();
  if (2.0L * K * V * M > static_cast<long double>(events)) {
    throw Error(path + ": otherData gives " + std::to_string(K) + " ranks x " + std::to_string(V) + " stages per rank x " +
                std::to_string(M) + " micro-batches, which need at least 2 x " + std::to_string(static_cast<long long>(K) * V) +
                " x " + std::to_string(M) + " compute actions, but the trace holds " + std::to_string(events) + " (is it truncated, or otherData wrong?)");
  }
  run.program = recorded_program(md, path);
  check_partition(md.partition, path, run.program.num_stages(), static_cast<int>(run.model.layers.size()), run.model.name);
  run.program.partition = md.partition;
  run.batch = md.batch;
  if (md.optimizer) {
    try {
      run.optimizer = models::parse_optimizer(*md.optimizer);
    } catch (const Error& e) {
      throw Error(path + ": otherData.optimizer: " + e.what());
    }
  }
  run.producer = md.producer;
  read_measured_ranks(meta, path, K, run);
  read_tensor_collectives(meta, path, K, run);
  read_exchanges(meta, path, run);
  check_actions(run);
  // The step starts with the first action of the rank holding stage 0: the
  // others wait for its activations (in a measured run, their receives are
  // posted during the previous step's last backward and optimizer step).
  const int first = run.program.rank_of(ps::StageId{0}).value;
  double begin = run.trace.timeline.ranks[first].front().start, end = begin;
  for (const auto& a : run.trace.timeline.ranks[first]) begin = std::min(begin, a.start);
  for (const auto& rank : run.trace.timeline.ranks) {
    for (const auto& a : rank) end = std::max(end, a.end);
  }
  run.step_start_s = begin;
  run.step_time_s = end - begin;
  if (!(run.step_time_s > 0)) throw Error(path + ": the step takes no time (every event has dur 0)");
  for (int r = 0; r < K; ++r) run.bubble += 1 - run.trace.timeline.busy(ps::RankId{r}) / run.step_time_s;
  run.bubble /= K;
  if (const auto recorded = recorded_bubble(meta, path)) {
    run.bubble = recorded->median;
    run.bubble_steps = recorded->steps;
  }
  return run;
}

}  // namespace pipetwin::calibration
