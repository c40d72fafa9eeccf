// The torch-free half of exec/: the torchrun environment, what each rank
// reports to rank 0, and how rank 0 assembles the run from the reports.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "exec/report.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::exec {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, int fallback, int lo, int hi) {
  const auto v = env(name);
  if (!v) return fallback;
  try {
    std::size_t used = 0;
    const int x = std::stoi(*v, &used);
    if (used != v->size() || x < lo || x > hi) throw std::invalid_argument(*v);
    return x;
  } catch (const std::exception&) {
    throw Error(std::string("environment variable ") + name + "='" + *v + "' is not an integer in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
}

nlohmann::json timeline_to_json(const schedule::Timeline& t) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rank : t.ranks) {
    nlohmann::json actions = nlohmann::json::array();
    for (const auto& a : rank) {
      nlohmann::json entry{schedule::to_string(a.action), a.start, a.end};
      if (a.action.overlapped) entry.push_back(true);  // of an OVERLAP_F_B, with the compute action before it
      actions.push_back(entry);
    }
    ranks.push_back(actions);
  }
  return ranks;
}

schedule::Timeline timeline_from_json(const nlohmann::json& j) {
  schedule::Timeline t;
  for (const auto& rank : j) {
    auto& out = t.ranks.emplace_back();
    for (const auto& a : rank) {
      out.push_back({schedule::parse_action(a.at(0).get<std::string>()), a.at(1).get<double>(), a.at(2).get<double>()});
      out.back().action.overlapped = a.size() > 3 && a.at(3).get<bool>();
    }
  }
  return t;
}

}  // namespace

std::optional<RankEnv> rank_env_from_environment() {
  if (!env("RANK")) return std::nullopt;
  RankEnv e;
  e.world_size = env_int("WORLD_SIZE", 1, 1, 1 << 16);
  e.rank = env_int("RANK", 0, 0, e.world_size - 1);
  e.local_world_size = env_int("LOCAL_WORLD_SIZE", 1, 1, 1 << 16);
  e.local_rank = env_int("LOCAL_RANK", 0, 0, e.local_world_size - 1);
  e.master_addr = env("MASTER_ADDR").value_or("127.0.0.1");
  e.master_port = env_int("MASTER_PORT", 29500, 1, 65535);
  e.store_hosted = env("PIPETWIN_STORE_HOSTED").has_value();
  return e;
}

Placement Placement::of(const schedule::Program& p, int device) {
  Placement w;
  w.tensor = p.tensor_parallel;
  w.data = p.data_parallel;
  w.member = device % w.tensor;
  w.replica = (device / w.tensor) % w.data;
  w.pipeline_rank = device / (w.tensor * w.data);
  w.shard = p.shard_group > 0 && p.shard_group < p.data_parallel ? p.shard_group : 0;
  w.expert = p.expert_parallel;
  return w;
}

namespace {

// The devices of this process's tensor member at pipeline rank k, in replicas
// first, first + step, ... below end.
std::vector<int> replicas_at(const Placement& w, int k, int first, int end, int step) {
  std::vector<int> out;
  for (int d = first; d < end; d += step) out.push_back(w.member + w.tensor * (d + w.data * k));
  return out;
}

}  // namespace

std::vector<int> Placement::data_group(int k) const { return replicas_at(*this, k, 0, data, 1); }

std::vector<int> Placement::shard_group(int k) const {
  const int first = replica - shard_index();
  return replicas_at(*this, k, first, first + shard_size(), 1);
}

std::vector<int> Placement::replicate_group(int k) const { return replicas_at(*this, k, shard_index(), data, shard_size()); }

std::vector<int> Placement::expert_group(int k) const {
  const int first = replica - expert_index();
  return replicas_at(*this, k, first, first + expert, 1);
}

std::vector<int> Placement::expert_peers(int k) const { return replicas_at(*this, k, expert_index(), data, expert); }

std::vector<int> Placement::tensor_group() const {
  std::vector<int> out;
  for (int t = 0; t < tensor; ++t) out.push_back(t + tensor * (replica + data * pipeline_rank));
  return out;
}

nlohmann::json RankReport::to_json() const {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : host_samples) samples.push_back(s.to_json());
  nlohmann::json steps_json = nlohmann::json::array();
  for (const auto& t : steps) steps_json.push_back(timeline_to_json(t));
  return {{"rank", rank},
          {"pipeline_rank", pipeline_rank},
          {"replica", replica},
          {"member", member},
          {"host", host},
          {"threads", threads},
          {"malloc", heap},
          {"host_cores", host_cores},
          {"sched_slice_s", sched_slice_s},
          {"gloo_backoffs", gloo_backoffs},
          {"clock_offset_s", clock_offset_s},
          {"clock_uncertainty_s", clock_uncertainty_s},
          {"steps", steps_json},
          {"losses", losses},
          {"stage_peak_stash_bytes", stage_peak_stash_bytes},
          {"stage_peak_versions", stage_peak_versions},
          {"collectives", collectives},
          {"tp_collective_s", tp_collective_s},
          {"all_to_all", all_to_all},
          {"all_gather", all_gather},
          {"gather_wait_s", gather_wait_s},
          {"compute_cpu_s", compute_cpu_s},
          {"peak_allocated_bytes", peak_allocated_bytes},
          {"baseline_bytes", baseline_bytes},
          {"peak_rss_bytes", peak_rss_bytes},
          {"host_samples", samples}};
}

RankReport RankReport::from_json(const nlohmann::json& j) {
  RankReport r;
  r.rank = j.at("rank").get<int>();
  r.pipeline_rank = j.value("pipeline_rank", -1);
  r.replica = j.value("replica", 0);
  r.member = j.value("member", 0);
  r.host = j.at("host").get<std::string>();
  r.threads = j.at("threads").get<int>();
  r.heap = j.value("malloc", "system");
  r.host_cores = j.value("host_cores", 0);
  r.sched_slice_s = j.value("sched_slice_s", 0.0);
  r.gloo_backoffs = j.value("gloo_backoffs", 0.0);
  r.clock_offset_s = j.at("clock_offset_s").get<double>();
  r.clock_uncertainty_s = j.at("clock_uncertainty_s").get<double>();
  for (const auto& s : j.at("steps")) r.steps.push_back(timeline_from_json(s));
  r.losses = j.at("losses").get<std::vector<double>>();
  r.stage_peak_stash_bytes = j.at("stage_peak_stash_bytes").get<std::vector<std::pair<int, double>>>();
  r.stage_peak_versions = j.at("stage_peak_versions").get<std::vector<std::pair<int, int>>>();
  r.collectives = j.value("collectives", nlohmann::json::array());
  r.tp_collective_s = j.value("tp_collective_s", std::vector<double>{});
  r.all_to_all = j.value("all_to_all", nlohmann::json::array());
  r.all_gather = j.value("all_gather", nlohmann::json::array());
  r.gather_wait_s = j.value("gather_wait_s", std::vector<double>{});
  r.compute_cpu_s = j.value("compute_cpu_s", std::vector<double>{});
  r.peak_allocated_bytes = j.at("peak_allocated_bytes").get<double>();
  r.baseline_bytes = j.at("baseline_bytes").get<double>();
  r.peak_rss_bytes = j.at("peak_rss_bytes").get<double>();
  for (const auto& s : j.value("host_samples", nlohmann::json::array())) r.host_samples.push_back(HostSample::from_json(s));
  return r;
}

namespace {

// Each replica's reports (tensor member 0) by pipeline rank: the timeline of
// a step is read from them.
std::vector<std::vector<const RankReport*>> by_replica(const std::vector<RankReport>& reports, std::size_t k) {
  std::map<int, std::vector<const RankReport*>> groups;
  for (const auto& r : reports) {
    if (r.member == 0) groups[r.replica].push_back(&r);
  }
  std::vector<std::vector<const RankReport*>> out;
  for (auto& [d, group] : groups) {
    if (group.size() != k) {
      throw Error("replica " + std::to_string(d) + " reported " + std::to_string(group.size()) + " pipeline ranks, not " +
                  std::to_string(k));
    }
    out.push_back(std::move(group));
  }
  return out;
}

// Replica `group`'s timeline of step s, on rank 0's clock.
schedule::Timeline replica_step(const std::vector<const RankReport*>& group, std::size_t s, std::size_t steps) {
  schedule::Timeline t;
  t.ranks.resize(group.size());
  for (const RankReport* r : group) {
    const int k = r->pipeline_rank < 0 ? r->rank : r->pipeline_rank;
    if (r->steps.size() != steps) throw Error("rank " + std::to_string(r->rank) + " reported a different number of steps");
    if (k < 0 || k >= static_cast<int>(group.size())) throw Error("rank " + std::to_string(r->rank) + " reported pipeline rank " + std::to_string(k));
    t.ranks[k] = r->steps[s].ranks.at(k);
  }
  return t;
}

double last_end(const schedule::Timeline& t) {
  double end = -1e300;
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) end = std::max(end, a.end);
  }
  return end;
}

// Each reduction's last post over the replicas: where the whole data group
// had come in (the recorded replica's own post may be earlier).
std::map<std::string, double> last_posts(const std::vector<schedule::Timeline>& replicas) {
  std::map<std::string, double> posts;
  for (const auto& one : replicas) {
    for (const auto& rank : one.ranks) {
      for (const auto& a : rank) {
        if (a.action.op != schedule::Op::REDUCE_GRAD) continue;
        const auto [it, fresh] = posts.emplace(schedule::to_string(a.action), a.start);
        if (!fresh) it->second = std::max(it->second, a.start);
      }
    }
  }
  return posts;
}

// A step's beginning and end. It begins with its first computation (the
// first stage's first forward): a rank that finished the previous step early
// and already waits in a receive is idle from then on, as in the simulator.
// Or with the FSDP gathers that computation waited for (its rank's UNSHARDs
// before it that gathered), as the simulator's step does.
std::pair<double, double> step_bounds(const schedule::Timeline& t) {
  double begin = 1e300, any = 1e300, end = -1e300;
  std::size_t first_rank = 0;
  for (std::size_t r = 0; r < t.ranks.size(); ++r) {
    for (const auto& a : t.ranks[r]) {
      if (schedule::is_compute(a.action.op) && a.start < begin) begin = a.start, first_rank = r;
      any = std::min(any, a.start);
      end = std::max(end, a.end);
    }
  }
  if (begin > end) return {any, end};
  const double computes = begin;
  for (const auto& a : t.ranks[first_rank]) {
    if (a.start >= computes) break;
    if (a.action.op == schedule::Op::UNSHARD && a.end > a.start) begin = std::min(begin, a.start);
  }
  return {begin, end};
}

}  // namespace

RunResult assemble(std::vector<RankReport> reports, int stages) {
  std::sort(reports.begin(), reports.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  RunResult out;
  const std::size_t k = reports.empty() || reports.front().steps.empty() ? reports.size() : reports.front().steps.front().ranks.size();
  const std::size_t steps = reports.empty() ? 0 : reports.front().steps.size();
  const auto replicas = by_replica(reports, k);
  double first = 0, last = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    // The step ends when its slowest replica's does (the next one waits for its reductions).
    std::vector<schedule::Timeline> all;
    for (const auto& group : replicas) all.push_back(replica_step(group, s, steps));
    schedule::Timeline t;
    for (const auto& one : all) {
      if (t.ranks.empty() || last_end(one) > last_end(t)) t = one;
    }
    std::map<std::string, double> posts = last_posts(all);
    const auto [begin, end] = step_bounds(t);
    if (s == 0) first = begin;
    last = end;
    for (auto& rank : t.ranks) {
      for (auto& a : rank) {
        a.start = std::max(a.start, begin) - begin;
        a.end = std::max(a.end, begin) - begin;
      }
    }
    for (auto& [action, post] : posts) post = std::max(post, begin) - begin;
    out.reduction_posts.push_back(std::move(posts));
    out.step_times_s.push_back(t.makespan());
    out.bubble_fractions.push_back(t.bubble_fraction());
    out.steps.push_back(std::move(t));
  }
  out.wall_s = steps > 0 ? last - first : 0;
  // The median step, leaving out the warm-up.
  const auto counted = static_cast<std::size_t>(warmup_steps(static_cast<int>(steps)));
  out.representative_step = counted < out.step_times_s.size()
                                ? static_cast<int>(schedule::median_index(out.step_times_s, counted))
                                : 0;
  out.stage_peak_stash_bytes.assign(stages, 0);
  out.stage_weight_versions.assign(stages, 1);
  int holders = 0;  // the last stage's ranks: one per replica (and tensor member)
  for (const auto& r : reports) {
    for (const auto& [stage, bytes] : r.stage_peak_stash_bytes) {
      out.stage_peak_stash_bytes.at(stage) = std::max(out.stage_peak_stash_bytes.at(stage), bytes);
    }
    for (const auto& [stage, versions] : r.stage_peak_versions) {
      out.stage_weight_versions.at(stage) = std::max(out.stage_weight_versions.at(stage), versions);
    }
    if (r.losses.empty() || r.member != 0) continue;
    if (out.losses.empty()) out.losses.assign(r.losses.size(), 0.0);
    if (r.losses.size() != out.losses.size()) throw Error("rank " + std::to_string(r.rank) + " reported a different number of losses");
    for (std::size_t i = 0; i < r.losses.size(); ++i) out.losses[i] += r.losses[i];
    ++holders;
  }
  for (auto& l : out.losses) l /= holders;
  std::vector<std::vector<HostSample>> samples;
  std::vector<std::string> hosts;
  std::vector<std::vector<double>> compute_cpu;
  for (const auto& r : reports) {
    samples.push_back(r.host_samples);
    hosts.push_back(r.host);
    compute_cpu.push_back(r.compute_cpu_s);
  }
  out.noise = measure_noise(samples, hosts, out.step_times_s, compute_cpu);
  out.ranks = std::move(reports);
  return out;
}

}  // namespace pipetwin::exec
