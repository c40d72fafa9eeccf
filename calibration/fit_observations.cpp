// The observations that fit() solves on: each run's paced timeline, which
// compute actions ran alone, and per stage and pass the median of their
// durations (compute, step, and the first forward's cold read of weights).
#include "calibration/fit_parts.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "schedule/error.hpp"

namespace pipetwin::calibration::fitting {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

ps::Timeline paced(const ps::Timeline& t) {
  ps::Timeline out = t;
  for (auto& rank : out.ranks) {
    for (std::size_t n = 0; n + 1 < rank.size(); ++n) rank[n].end = std::max(rank[n].end, rank[n + 1].start);
  }
  return out;
}

pm::PartitionRequest request_of(const TraceRun& run) {
  pm::PartitionRequest r;
  r.program = run.program;
  r.microbatch_size = run.microbatch_size;
  r.optimizer = run.optimizer;
  return r;
}

double pass_flops(const pm::Layer& l, pm::Pass pass) {
  return pass == pm::Pass::Backward ? l.cost.input_grad_flops + l.cost.weight_grad_flops : l.cost.forward_flops;
}

int threads_of(const TraceRun& run) { return run.threads.empty() ? 1 : run.threads.front(); }

bool oversubscribed(const TraceRun& run, const pm::Hardware& base) {
  if (base.topology.kind != pm::TopologyKind::SharedHost) return false;
  return run.ranks() * threads_of(run) > base.topology.host_cores;
}

std::vector<std::vector<double>> concurrent_time(const ps::Timeline& timeline) {
  const auto& ranks = timeline.ranks;
  const auto busy = [](const ps::Op op) { return ps::is_compute(op) || op == ps::Op::STEP; };
  std::vector<std::pair<double, int>> edges;
  for (const auto& rank : ranks) {
    for (const auto& a : rank) {
      if (!busy(a.action.op) || a.end <= a.start) continue;
      edges.push_back({a.start, +1});
      edges.push_back({a.end, -1});
    }
  }
  std::sort(edges.begin(), edges.end());
  // Piecewise constant: computing[i] ranks on [times[i], times[i + 1]).
  std::vector<double> times;
  std::vector<int> computing;
  int now = 0;
  for (std::size_t i = 0; i < edges.size(); ++i) {
    now += edges[i].second;
    if (i + 1 < edges.size() && edges[i + 1].first == edges[i].first) continue;
    times.push_back(edges[i].first);
    computing.push_back(now);
  }
  std::vector<std::vector<double>> out(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& a : ranks[r]) {
      double shared = 0;
      if (busy(a.action.op) && a.end > a.start) {
        auto i = static_cast<std::size_t>(std::upper_bound(times.begin(), times.end(), a.start) - times.begin());
        i = i == 0 ? 0 : i - 1;
        for (; i < times.size() && times[i] < a.end; ++i) {
          const double from = std::max(a.start, times[i]);
          const double to = i + 1 < times.size() ? std::min(a.end, times[i + 1]) : a.end;
          if (to > from && computing[i] >= 2) shared += to - from;
        }
      }
      out[r].push_back(shared);
    }
  }
  return out;
}

double weight_bytes(const TraceRun& run, int s) {
  const auto [i, j] = run.program.partition.at(s);
  double params = 0;
  for (int l = i; l < j; ++l) params += static_cast<double>(run.model.layers.at(l).cost.params);
  return params * pm::bytes_per_element(run.model.precision);
}

Observations compute_observations(const std::vector<TraceRun>& runs, bool all) {
  Observations out;
  for (const TraceRun& run : runs) {
    const auto& p = run.program;
    std::map<std::pair<int, pm::Pass>, std::vector<double>> by_pass, first;  // first: micro-batch 0's forwards
    std::map<int, std::vector<double>> by_step, input_grads, weight_grads;
    const ps::Timeline timeline = paced(run.trace.timeline);
    const auto shared = concurrent_time(timeline);
    for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
      for (std::size_t n = 0; n < timeline.ranks[r].size(); ++n) {
        const auto& a = timeline.ranks[r][n];
        const int s = a.action.stage.value;
        const double d = a.end - a.start;
        const bool alone = shared[r][n] <= 1e-3 * d;
        if (!alone && (ps::is_compute(a.action.op) || a.action.op == ps::Op::STEP)) ++out.shared_actions;
        if (!alone && !all) continue;
        switch (a.action.op) {
          case ps::Op::F:
            (a.action.microbatch->value == 0 ? first : by_pass)[{s, p.recomputes(a.action.stage, *a.action.microbatch)
                                                                        ? pm::Pass::ForwardNoGrad
                                                                        : pm::Pass::Forward}]
                .push_back(d);
            break;
          case ps::Op::R: by_pass[{s, pm::Pass::Recompute}].push_back(d); break;
          case ps::Op::B: by_pass[{s, pm::Pass::Backward}].push_back(d); break;
          case ps::Op::STEP: by_step[s].push_back(d); break;
          case ps::Op::I: input_grads[s].push_back(d); break;
          case ps::Op::W: weight_grads[s].push_back(d); break;
          default: break;  // transfers apart
        }
      }
    }
    for (const auto& [key, durations] : by_pass) out.compute.push_back({&run, key.first, key.second, median(durations), 0});
    // A stage's first forward only where it has no other (it also reads its
    // weights cold); beside two others or more, how much longer it took.
    for (const auto& [key, durations] : first) {
      const auto others = by_pass.find(key);
      if (others == by_pass.end()) {
        out.compute.push_back({&run, key.first, key.second, median(durations), weight_bytes(run, key.first)});
      } else if (!all && others->second.size() >= 2) {
        out.cold.push_back({&run, weight_bytes(run, key.first), median(durations) - median(others->second)});
      }
    }
    for (const auto& [s, durations] : by_step) out.steps.push_back({&run, s, median(durations)});
    // A backward split by a zero-bubble schedule: its two halves' medians make
    // a backward row (one action's overhead more), and tell W's share.
    for (const auto& [s, inputs] : input_grads) {
      const auto w = weight_grads.find(s);
      if (w == weight_grads.end()) continue;
      const double i_s = median(inputs), w_s = median(w->second);
      out.compute.push_back({&run, s, pm::Pass::Backward, i_s + w_s, 0, 2});
      out.split.push_back({&run, s, i_s, w_s});
    }
  }
  return out;
}

std::string partition_text(const std::vector<ps::LayerRange>& partition, const std::string& separator) {
  std::string out;
  for (const auto& r : partition) out += (out.empty() ? "" : separator) + std::to_string(r.begin) + ":" + std::to_string(r.end);
  return out;
}

std::vector<std::string> never_alone_notes(const Observations& alone, const Observations& every, const pm::Model& model) {
  const auto partition_of = [](const TraceRun& run) { return partition_text(run.program.partition, " "); };
  std::set<std::tuple<std::string, int, pm::Pass>> seen;  // (partition, stage, pass) with a row
  for (const auto& g : alone.compute) seen.insert({partition_of(*g.run), g.stage, g.pass});
  struct Missing {
    std::set<const TraceRun*> runs;
    std::set<pm::Pass> passes;
    ps::LayerRange layers{};
  };
  std::map<std::pair<std::string, int>, Missing> missing;  // (partition, stage)
  for (const auto& g : every.compute) {
    const std::string partition = partition_of(*g.run);
    if (seen.count({partition, g.stage, g.pass}) > 0) continue;
    auto& m = missing[{partition, g.stage}];
    m.runs.insert(g.run);
    m.passes.insert(g.pass);
    m.layers = g.run->program.partition.at(g.stage);
  }
  std::vector<std::string> out;
  for (const auto& [key, m] : missing) {
    std::string passes, kinds;
    for (const pm::Pass pass : m.passes) passes += (passes.empty() ? "" : ", ") + std::string(pm::pass_name(pass));
    std::set<std::string> held;
    for (int l = m.layers.begin; l < m.layers.end; ++l) held.insert(std::string(pm::kind_name(model.layers[l].kind)));
    for (const auto& k : held) kinds += (kinds.empty() ? "" : ", ") + k;
    out.push_back("stage " + std::to_string(key.second) + " of partition [" + key.first + "] (" + kinds + ") ran its " +
                  passes + " only while another rank computed, in all " + std::to_string(m.runs.size()) +
                  " run(s) with that partition: the curves have no row of its own there, so its predicted time "
                  "rests on the other partitions' rows (a kind that only it holds is fitted from differences)");
  }
  return out;
}

}  // namespace pipetwin::calibration::fitting
