// load_trace_run(), check_together(): every refusal names the file.
#include "calibration/traces.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>

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

std::optional<RecordedBubble> recorded_bubble(const json& meta, const std::string& path) {
  if (!meta.contains("measured") || !meta["measured"].is_object() || !meta["measured"].contains("bubble_fractions")) {
    return std::nullopt;
  }
  const json& all = meta["measured"]["bubble_fractions"];
  const std::string where = path + ": otherData.measured.bubble_fractions";
  if (!all.is_array() || all.empty()) throw Error(where + " must be a non-empty list of fractions");
  // The steps the run counted (measured.noise.first_counted_step: its
  // warm-up left out); the first alone in a trace from before that record.
  std::size_t first = all.size() > 1 ? 1 : 0;
  const json& noise = meta["measured"].value("noise", json::object());
  if (noise.is_object() && noise.contains("first_counted_step") && noise["first_counted_step"].is_number_integer()) {
    const auto f = noise["first_counted_step"].get<long long>();
    if (f < 0 || f >= static_cast<long long>(all.size())) {
      throw Error(path + ": otherData.measured.noise.first_counted_step is " + std::to_string(f) + ", outside the " +
                  std::to_string(all.size()) + " steps of measured.bubble_fractions");
    }
    first = static_cast<std::size_t>(f);
  }
  std::vector<double> steps;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!all[i].is_number() || !(all[i].get<double>() >= 0 && all[i].get<double>() <= 1)) {
      throw Error(where + "[" + std::to_string(i) + "] must be a fraction between 0 and 1, got " + all[i].dump());
    }
    if (i >= first) steps.push_back(all[i].get<double>());
  }
  return RecordedBubble{median(steps), static_cast<int>(steps.size()), steps};
}

std::string TraceRun::describe() const {
  return program.schedule + " K=" + std::to_string(program.num_ranks) + " M=" + std::to_string(program.num_microbatches) +
         " mb=" + std::to_string(microbatch_size) + " recompute " + std::string(ps::recompute_name(program.recompute)) +
         (program.tensor_parallel > 1 ? " T=" + std::to_string(program.tensor_parallel) : "") +
         (program.data_parallel > 1 ? " D=" + std::to_string(program.data_parallel) : "") +
         (program.shard_optimizer ? " ZeRO-1" : "");
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

// measured.ranks[].tp_collective_s (T > 1): per pipeline rank, its members'
// mean at the trace's step; left empty unless every rank has one.
void read_tensor_collectives(const json& meta, const std::string& path, int K, TraceRun& run) {
  if (run.program.tensor_parallel <= 1 || !meta.contains("measured") || !meta["measured"].is_object()) return;
  const json& m = meta["measured"];
  if (!m.contains("ranks") || !m["ranks"].is_array() || !m.contains("representative_step") ||
      !m["representative_step"].is_number_integer()) {
    return;
  }
  const std::int64_t step = m["representative_step"].get<std::int64_t>();
  std::vector<double> sum(K, 0.0);
  std::vector<int> members(K, 0);
  for (std::size_t i = 0; i < m["ranks"].size(); ++i) {
    const json& e = m["ranks"][i];
    if (!e.is_object() || !e.contains("tp_collective_s")) continue;
    const std::string where = path + ": otherData.measured.ranks[" + std::to_string(i) + "]";
    const json& s = e["tp_collective_s"];
    if (!s.is_array() || step < 0 || step >= static_cast<std::int64_t>(s.size()) || !s[step].is_number() ||
        !std::isfinite(s[step].get<double>()) || s[step].get<double>() < 0) {
      throw Error(where + ".tp_collective_s must list a finite, non-negative number of seconds for each step, the " +
                  "trace's step " + std::to_string(step) + " included");
    }
    const int k = e.contains("pipeline_rank") && e["pipeline_rank"].is_number_integer() ? e["pipeline_rank"].get<int>() : -1;
    if (k < 0 || k >= K) throw Error(where + ".pipeline_rank must be a rank of the " + std::to_string(K) + " ranks");
    sum[k] += s[step].get<double>();
    ++members[k];
  }
  if (std::find(members.begin(), members.end(), 0) != members.end()) return;
  for (int k = 0; k < K; ++k) run.tp_collective_s.push_back(sum[k] / members[k]);
}

// What a measured run recorded of each rank (otherData.measured.ranks):
// threads, the host's usable cores, the host, the clock's uncertainty.
// The K pipeline ranks' entries: measured.ranks lists K of them, or every one
// of the T x K x D processes, by process (pipeline rank k's first is T·D·k:
// the replica 0, tensor member 0 of that rank).
void read_measured_ranks(const json& meta, const std::string& path, int K, TraceRun& run) {
  if (!meta.contains("measured") || !meta["measured"].is_object() || !meta["measured"].contains("ranks")) {
    run.clock_uncertainty_s.assign(K, 0.0);
    return;
  }
  const json& ranks = meta["measured"]["ranks"];
  const int per = run.program.tensor_parallel * run.program.data_parallel;
  if (!ranks.is_array() || (static_cast<int>(ranks.size()) != K && static_cast<int>(ranks.size()) != K * per)) {
    throw Error(path + ": otherData.measured.ranks must list the " + std::to_string(K) + " ranks" +
                (per > 1 ? " or the " + std::to_string(K * per) + " processes" : ""));
  }
  const std::size_t stride = static_cast<int>(ranks.size()) == K ? 1 : static_cast<std::size_t>(per);
  for (std::size_t r = 0; r < ranks.size(); r += stride) {
    const json& e = ranks[r];
    const std::string where = path + ": otherData.measured.ranks[" + std::to_string(r) + "]";
    if (!e.is_object() || !e.contains("threads") || !e["threads"].is_number_integer()) {
      throw Error(where + " has no integer 'threads'");
    }
    run.threads.push_back(e["threads"].get<int>());
    const bool has_cores = e.contains("host_cores") && e["host_cores"].is_number_integer();
    const int cores = has_cores ? e["host_cores"].get<int>() : 0;
    if (cores < 0) throw Error(where + ".host_cores must not be negative, got " + std::to_string(cores));
    run.host_cores.push_back(cores);
    const bool has_slice = e.contains("sched_slice_s") && e["sched_slice_s"].is_number();
    const double slice = has_slice ? e["sched_slice_s"].get<double>() : 0.0;
    if (!std::isfinite(slice) || slice < 0 || slice > 1) {
      throw Error(where + ".sched_slice_s must be between 0 and 1 second, got " + std::to_string(slice));
    }
    run.sched_slice_s.push_back(slice);
    run.hosts.push_back(e.contains("host") && e["host"].is_string() ? e["host"].get<std::string>() : "");
    const bool has_unc = e.contains("clock_uncertainty_s") && e["clock_uncertainty_s"].is_number();
    run.clock_uncertainty_s.push_back(has_unc ? e["clock_uncertainty_s"].get<double>() : 0.0);
  }
  if (meta["measured"].contains("reduction_posts_s")) {
    const json& posts = meta["measured"]["reduction_posts_s"];
    const std::string where = path + ": otherData.measured.reduction_posts_s";
    if (!posts.is_object()) throw Error(where + " must map each REDUCE_GRAD to a time in seconds");
    for (const auto& [action, t] : posts.items()) {
      if (!t.is_number() || !std::isfinite(t.get<double>())) {
        throw Error(where + "." + action + " must be a finite number of seconds");
      }
      run.reduction_posts_s[action] = t.get<double>();
    }
  }
  for (const json& e : ranks) {
    if (!e.is_object() || !e.contains("collectives") || !e["collectives"].is_array()) continue;
    for (const json& c : e["collectives"]) {
      if (c.is_object() && c.contains("backend") && c["backend"].is_string() && (c["backend"] == "gloo" || c["backend"] == "Gloo")) run.collective = models::Collective::Ring;
    }
  }
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

namespace {

// The first difference between two models, or "" when they are the same.
std::string model_difference(const models::Model& a, const models::Model& b) {
  if (a.name != b.name) return "model '" + b.name + "', not '" + a.name + "'";
  if (a.precision != b.precision) {
    return "precision " + std::string(models::precision_name(b.precision)) + ", not " +
           std::string(models::precision_name(a.precision));
  }
  if (a.layers.size() != b.layers.size()) {
    return std::to_string(b.layers.size()) + " layers, not " + std::to_string(a.layers.size());
  }
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    if (x.kind != y.kind || x.cost.forward_flops != y.cost.forward_flops ||
        x.cost.input_grad_flops != y.cost.input_grad_flops || x.cost.weight_grad_flops != y.cost.weight_grad_flops ||
        x.cost.params != y.cost.params || x.cost.output_elems != y.cost.output_elems ||
        x.cost.stashed_elems != y.cost.stashed_elems || x.shape.flash_attention != y.shape.flash_attention) {
      return "a different layer " + std::to_string(l) + " (" + y.name + ", " + std::string(models::kind_name(y.kind)) +
             ")";
    }
  }
  return "";
}

}  // namespace

int recorded_host_cores(const std::vector<TraceRun>& runs) {
  const TraceRun* first = nullptr;
  int cores = 0;
  for (const auto& run : runs) {
    for (std::size_t r = 0; r < run.host_cores.size(); ++r) {
      if (run.host_cores[r] <= 0) continue;
      if (first == nullptr) {
        first = &run;
        cores = run.host_cores[r];
      } else if (run.host_cores[r] != cores) {
        throw Error(run.path + ": rank " + std::to_string(r) + " ran on a host with " + std::to_string(run.host_cores[r]) +
                    " usable cores, but " + first->path + " on one with " + std::to_string(cores) +
                    ": calibrate traces of one kind of host at a time (otherData.measured.ranks[].host_cores)");
      }
    }
  }
  return cores;
}

double recorded_sched_slice_s(const std::vector<TraceRun>& runs) {
  double slice = 0;
  for (const auto& run : runs) {
    for (const double s : run.sched_slice_s) {
      if (s <= 0) continue;
      if (slice > 0 && s != slice) return 0;
      slice = s;
    }
  }
  return slice;
}

void check_together(const std::vector<TraceRun>& runs) {
  if (runs.empty()) throw Error("calibrate: no traces given");
  const TraceRun& first = runs.front();
  // One file given twice would count twice in every fit.
  std::map<std::string, const TraceRun*> by_file;
  for (const auto& run : runs) {
    char* real = ::realpath(run.path.c_str(), nullptr);
    if (real == nullptr) continue;  // not a file (traces made in memory)
    const std::string key = real;
    std::free(real);
    const auto [it, fresh] = by_file.emplace(key, &run);
    if (!fresh) throw Error(run.path + ": given twice (also as " + it->second->path + ")");
  }
  // Measured and simulated traces fit different things: a simulated one is a
  // synthetic test of the fit, never evidence about a machine.
  const auto measured = [](const TraceRun& r) { return r.producer == "pipetwin run"; };
  for (const auto& run : runs) {
    if (measured(run) != measured(first)) {
      const TraceRun& sim = measured(run) ? first : run;
      const TraceRun& real = measured(run) ? run : first;
      throw Error(sim.path + ": not measured (otherData.producer is '" + sim.producer + "', not 'pipetwin run'), but " +
                  real.path + " is: calibrate measured traces, or simulated ones alone");
    }
  }
  for (const auto& run : runs) {
    const std::string diff = model_difference(first.model, run.model);
    if (!diff.empty()) {
      throw Error(run.path + ": its model has " + diff + " as in " + first.path +
                  ": calibrate traces of one model at a time");
    }
  }
  const TraceRun* with_threads = nullptr;
  for (const auto& run : runs) {
    if (run.threads.empty()) continue;
    if (with_threads == nullptr) with_threads = &run;
    const int want = with_threads->threads.front();
    for (std::size_t r = 0; r < run.threads.size(); ++r) {
      if (run.threads[r] != want) {
        throw Error(run.path + ": rank " + std::to_string(r) + " ran with " + std::to_string(run.threads[r]) +
                    " intra-op threads, but " + with_threads->path + " with " + std::to_string(want) +
                    ": a calibrated device is one thread count (pipetwin run --threads)");
      }
    }
  }
}

}  // namespace pipetwin::calibration
