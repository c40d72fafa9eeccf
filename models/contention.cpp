// check_contention: interval overlaps per directed link and per shared host.
#include "models/contention.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>

#include "schedule/interpreter.hpp"

namespace pipetwin::models {
namespace {

struct Interval {
  double start, end;
  std::string what;
};

std::string at(double t) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g s", t);
  return buf;
}

// The first pair of overlapping intervals, if any.
const Interval* first_overlap(std::vector<Interval>& v, const Interval** other) {
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  const Interval* longest = nullptr;
  for (const auto& i : v) {
    if (longest && i.start < longest->end - 1e-12 * std::max(1.0, longest->end)) {
      *other = longest;
      return &i;
    }
    if (!longest || i.end > longest->end) longest = &i;
  }
  return nullptr;
}

}  // namespace

ContentionCheck check_contention(const schedule::Timeline& t, const schedule::Program& p,
                                 const std::vector<schedule::StageCosts>& costs, const Topology& topo) {
  // Data-parallel reductions are rings of messages among the replicas: the
  // evaluator has no network for them, so it never answers for them.
  if (p.data_parallel > 1) {
    for (const auto& c : costs) {
      if (c.reduce_bytes > 0 || c.gather_bytes > 0) {
        return {false, "the gradients' reductions over the " + std::to_string(p.data_parallel) +
                           " data-parallel replicas share the network with the pipeline's transfers"};
      }
    }
  }
  // Cores of a shared host.
  const std::int64_t processes = p.num_devices();
  const double capacity = topo.compute_capacity(processes);
  if (topo.kind == TopologyKind::SharedHost && p.num_ranks > capacity) {
    std::vector<std::pair<double, int>> events;
    for (const auto& rank : t.ranks) {
      for (const auto& a : rank) {
        // What SimGrid executes on the host's cores: compute and the optimizer step.
        if ((schedule::is_compute(a.action.op) || a.action.op == schedule::Op::STEP) && a.end > a.start) {
          events.push_back({a.start, +1});
          events.push_back({a.end, -1});
        }
      }
    }
    std::sort(events.begin(), events.end());  // ends (-1) before starts (+1) at equal times
    int running = 0;
    for (const auto& [time, delta] : events) {
      running += delta;
      if (running > capacity) {
        char cores[32];
        std::snprintf(cores, sizeof cores, "%g", capacity);
        return {false, std::to_string(running) + " ranks compute at once at " + at(time) + " on a host of " + cores +
                           (topo.calibrated_sharing(processes) ? " effective cores" : " cores")};
      }
    }
  }
  // Directed links.
  std::map<std::string, std::vector<Interval>> links;
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) {
      if (!schedule::is_send(a.action.op)) continue;
      const auto& c = costs[a.action.stage.value];
      const double flight = c.flight_s(a.action.op);
      if (flight <= 0) continue;
      const int src = p.rank_of(a.action.stage).value, dst = schedule::peer_of(p, a.action).value;
      // Replica 0's tensor-parallel groups at the two ranks (Program::first_device).
      const int lo = p.first_device(0, schedule::RankId{std::min(src, dst)});
      const int hi = p.first_device(0, schedule::RankId{std::max(src, dst)});
      const auto hops = topo.route_group(lo, hi, p.tensor_parallel);  // width 1: route(lo, hi)
      const std::size_t half = hops.size() == 1 ? 1 : hops.size() / 2;
      for (std::size_t h = 0; h < hops.size(); ++h) {
        const bool up = (h < half) == (src < dst) || topo.kind == TopologyKind::SharedHost;
        // A blocking send's action ends with its flight (StageCosts::blocking_sends).
        const double leaves = c.blocking_sends ? a.end - flight : a.end;
        links[hops[h].link + (up ? " (up)" : " (down)")].push_back({leaves, leaves + flight, schedule::to_string(a.action)});
      }
    }
  }
  for (auto& [link, intervals] : links) {
    const Interval* other = nullptr;
    if (const Interval* i = first_overlap(intervals, &other)) {
      return {false, "transfers " + other->what + " and " + i->what + " share link " + link + " at " + at(i->start)};
    }
  }
  return {true, "no shared resource: no two transfers share a link at once and every rank has its own core"};
}

}  // namespace pipetwin::models
