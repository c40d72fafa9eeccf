// otherData.measured read into a TraceRun: each step's bubble, each rank's
// record, the reductions' posts and the tensor groups' collectives.
#include "calibration/traces_measured.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "schedule/error.hpp"

namespace pipetwin::calibration {
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

namespace {

// measured.ranks[].<key> at the trace's step, each {calls, seconds, bytes}.
std::vector<TraceRun::Exchanges> read_records(const json& m, const std::string& path, const char* key) {
  std::vector<TraceRun::Exchanges> out;
  const std::int64_t step = m["representative_step"].get<std::int64_t>();
  for (std::size_t i = 0; i < m["ranks"].size(); ++i) {
    const json& e = m["ranks"][i];
    if (!e.is_object() || !e.contains(key)) continue;
    const std::string where = path + ": otherData.measured.ranks[" + std::to_string(i) + "]." + key;
    const json& s = e[key];
    if (!s.is_array() || step < 0 || step >= static_cast<std::int64_t>(s.size()) || !s[step].is_object()) {
      throw Error(where + " must hold an entry for each step, the trace's step " + std::to_string(step) + " included");
    }
    TraceRun::Exchanges x;
    for (const auto& [field, value] : {std::pair<const char*, double*>{"calls", &x.calls}, {"seconds", &x.seconds},
                                       {"bytes", &x.bytes}}) {
      const json& v = s[step].contains(field) ? s[step][field] : json();
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
        throw Error(where + "[" + std::to_string(step) + "]." + field + " must be a finite, non-negative number");
      }
      *value = v.get<double>();
    }
    out.push_back(x);
  }
  return out;
}

}  // namespace

void read_exchanges(const json& meta, const std::string& path, TraceRun& run) {
  if (!meta.contains("measured") || !meta["measured"].is_object()) return;
  const json& m = meta["measured"];
  if (!m.contains("ranks") || !m["ranks"].is_array() || !m.contains("representative_step") ||
      !m["representative_step"].is_number_integer()) {
    return;
  }
  if (run.program.expert_parallel > 1) run.all_to_all = read_records(m, path, "all_to_all");
  if ((run.program.zero == 1 || run.program.zero == 2) && run.program.data_parallel > 1) {
    run.all_gather = read_records(m, path, "all_gather");
  }
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
      if (c.is_object() && c.contains("buckets") && c["buckets"].is_number_integer() && c["buckets"].get<int>() > 1) run.bucketed = true;
    }
  }
}

}  // namespace pipetwin::calibration
