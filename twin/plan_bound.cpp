// The evaluator's figure of a candidate with data parallelism, made a bound
// that times its reductions: each stage's gradient reduction (ZeRO-1: its
// reduce-scatter, and the all-gather after its step; ZeRO-2 and 3: a
// reduce-scatter per micro-batch, each after the one before) and FSDP's
// UNSHARD gathers (the stage's next compute waiting) in closed form.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "models/collectives.hpp"
#include "twin/plan_parts.hpp"

namespace pipetwin::twin {

namespace {

// A rank's data group's links: the whole group's, and under HSDP (G < D)
// its shard group's and its replicate group's (the same device of each of
// the D / G shard groups).
struct GroupLinks {
  models::Link all, shard, replicate;
};

// Seconds of a collective of `bytes` over the data group as sim/ runs it
// (over_data_group): over all D, or under HSDP inside the shard group of G
// and then, but for an all-gather, the shard (bytes / G) all-reduced over the
// D / G groups.
double over_data_group(const models::CollectiveEntry& entry, const schedule::Program& p, const GroupLinks& links, double bytes,
                       int chunks) {
  const int D = p.data_parallel, G = p.shard_degree();
  if (G >= D) return entry.seconds(links.all, bytes, D, chunks);
  const double inside = entry.seconds(links.shard, bytes, G, chunks);
  if (entry.algorithm == schedule::CollectiveAlgorithm::RingAllGather) return inside;
  return inside + models::collective(schedule::CollectiveAlgorithm::RingAllReduce).seconds(links.replicate, bytes / G, D / G, 1);
}

// When stage `costs`' reduction starts and ends, as sim/ times it: one
// collective from `at`, or with buckets, from the backward [backward_start,
// + backward_s) that produces them, each bucket from when it is ready.
std::pair<double, double> reduction(const schedule::Program& p, const schedule::StageCosts& costs, const GroupLinks& links,
                                    double at, double backward_start, double backward_s) {
  const double bytes = costs.reduce_bytes * p.tensor_parallel;  // the group's T shares on its merged route, as sim/
  if (bytes <= 0) return {at, at};
  const auto& entry =
      models::collective(p.shard_optimizer() ? schedule::CollectiveAlgorithm::RingReduceScatter : costs.reduce_collective);
  const auto buckets = models::gradient_buckets(costs.reduce_bytes, costs.reduce_bucket_bytes, costs.reduce_first_bucket_bytes);
  if (buckets.size() < 2 && !costs.reduce_each_microbatch) {
    return {at, at + over_data_group(entry, p, links, bytes, costs.reduce_chunks)};
  }
  const auto seconds = [&](double b) {
    return over_data_group(entry, p, links, b * p.tensor_parallel, models::bucket_chunks(costs.reduce_chunks, b, costs.reduce_bytes));
  };
  // ZeRO-2 and 3, one micro-batch's: its first bucket from when the stage's
  // earlier reductions are done (`at`) too.
  const double free = costs.reduce_each_microbatch ? at : 0;
  return {backward_start, models::bucketed_reduce_end(buckets, backward_start, backward_s, seconds, free)};
}

double gather_seconds(const schedule::Program& p, double gather_bytes, const GroupLinks& links) {
  const double bytes = gather_bytes * p.tensor_parallel;
  if (bytes <= 0) return 0;
  return over_data_group(models::collective(schedule::CollectiveAlgorithm::RingAllGather), p, links, bytes, 1);
}

}  // namespace

schedule::Timeline with_reductions(const Scenario& sc, const std::vector<schedule::StageCosts>& table,
                                   schedule::Timeline timeline) {
  const auto& p = sc.program;
  if (p.data_parallel <= 1) return timeline;
  for (int r = 0; r < static_cast<int>(timeline.ranks.size()); ++r) {
    const auto& topo = sc.hardware.topology;
    const int T = p.tensor_parallel, D = p.data_parallel, G = p.shard_degree();
    GroupLinks link{models::data_group_link(topo, T, D, r), {}, {}};
    if (G < D) link.shard = models::data_subgroup_link(topo, T, D, r, G, 1), link.replicate = models::data_subgroup_link(topo, T, D, r, D / G, G);
    std::map<int, double> reduced;  // stage -> when its reduction ends
    std::map<int, double> unsharded;  // stage -> when its UNSHARD's gather ends, until it computes
    std::map<int, std::pair<double, double>> backward;  // stage -> its latest backward's start and length
    double delay = 0;               // how much later than the evaluator's this rank's actions run
    for (auto& a : timeline.ranks[r]) {
      const int s = a.action.stage.value;
      const double length = a.end - a.start;
      a.start += delay;
      if (schedule::is_recv(a.action.op)) {
        // Its message arrives when the evaluator says (the other ranks are
        // not delayed here): a wait for it absorbs this rank's delay.
        const double arrival = a.end;
        a.end = std::max(arrival, a.start);
        delay = a.end - arrival;
        continue;
      }
      // FSDP: the stage's compute waits for its UNSHARD's gather, as in sim/.
      if (const auto it = unsharded.find(s); it != unsharded.end() && schedule::is_compute(a.action.op)) {
        if (it->second > a.start) delay += it->second - a.start, a.start = it->second;
        unsharded.erase(it);
      }
      if (a.action.op == schedule::Op::STEP) {
        if (const auto it = reduced.find(s); it != reduced.end() && it->second > a.start) {
          delay += it->second - a.start;
          a.start = it->second;
        }
      }
      a.end = a.start + length;
      const bool each = table.at(s).reduce_each_microbatch;
      if (a.action.op == schedule::Op::B || a.action.op == schedule::Op::W) {
        backward[s] = {a.start, length};
        // ZeRO-2 and 3: this micro-batch's reduce-scatter, after the stage's earlier ones.
        if (each) reduced[s] = reduction(p, table.at(s), link, reduced.count(s) ? reduced[s] : 0, a.start, length).second;
      }
      if (a.action.op == schedule::Op::REDUCE_GRAD && each) {
        a.start = backward.count(s) ? backward[s].first : a.start;  // as sim/ times it: from the last backward
        a.end = std::max(a.start, reduced.count(s) ? reduced[s] : a.start);
      } else if (a.action.op == schedule::Op::REDUCE_GRAD) {
        // Asynchronous from here, as in sim/: the rank goes on; its STEP waits.
        const auto [from, span] = backward.count(s) ? backward[s] : std::pair<double, double>{a.start, 0};
        std::tie(a.start, a.end) = reduction(p, table.at(s), link, a.start, from, span);
        reduced[s] = a.end;
      } else if (a.action.op == schedule::Op::UNSHARD && table.at(s).unshard_bytes > 0) {
        // Asynchronous from here, alone on its link.
        a.end = a.start + gather_seconds(p, table.at(s).unshard_bytes, link);
        unsharded[s] = a.end;
      } else if (a.action.op == schedule::Op::STEP) {
        const double gather = gather_seconds(p, table.at(s).gather_bytes, link);  // in the STEP's time, as in sim/
        a.end += gather;
        delay += gather;
      }
    }
  }
  return timeline;
}

}  // namespace pipetwin::twin
