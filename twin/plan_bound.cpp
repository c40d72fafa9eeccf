// The evaluator's figure of a candidate with data parallelism, made a bound
// that times its reductions: each stage's gradient reduction (ZeRO-1: its
// reduce-scatter, and the all-gather after its step; ZeRO-2 and 3: a
// reduce-scatter per micro-batch, each after the one before) in closed form.
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "models/collectives.hpp"
#include "twin/plan_parts.hpp"

namespace pipetwin::twin {

namespace {

// When stage `costs`' reduction starts and ends, as sim/ times it: one
// collective from `at`, or with buckets, from the backward [backward_start,
// + backward_s) that produces them, each bucket from when it is ready.
std::pair<double, double> reduction(const schedule::Program& p, const schedule::StageCosts& costs, const models::Link& link,
                                    double at, double backward_start, double backward_s) {
  const double bytes = costs.reduce_bytes * p.tensor_parallel;  // the group's T shares on its merged route, as sim/
  if (bytes <= 0) return {at, at};
  const auto& entry =
      models::collective(p.shard_optimizer() ? schedule::CollectiveAlgorithm::RingReduceScatter : costs.reduce_collective);
  const auto buckets = models::gradient_buckets(costs.reduce_bytes, costs.reduce_bucket_bytes, costs.reduce_first_bucket_bytes);
  if (buckets.size() < 2 && !costs.reduce_each_microbatch) {
    return {at, at + entry.seconds(link, bytes, p.data_parallel, costs.reduce_chunks)};
  }
  const auto seconds = [&](double b) {
    const int chunks = std::max(1, static_cast<int>(std::lround(costs.reduce_chunks * b / costs.reduce_bytes)));
    return entry.seconds(link, b * p.tensor_parallel, p.data_parallel, chunks);
  };
  // ZeRO-2 and 3, one micro-batch's: its first bucket from when the stage's
  // earlier reductions are done (`at`) too.
  const double free = costs.reduce_each_microbatch ? at : 0;
  return {backward_start, models::bucketed_reduce_end(buckets, backward_start, backward_s, seconds, free)};
}

double gather_seconds(const schedule::Program& p, const schedule::StageCosts& costs, const models::Link& link) {
  const double bytes = costs.gather_bytes * p.tensor_parallel;
  if (bytes <= 0) return 0;
  return models::collective(schedule::CollectiveAlgorithm::RingAllGather).seconds(link, bytes, p.data_parallel, 1);
}

}  // namespace

schedule::Timeline with_reductions(const Scenario& sc, const std::vector<schedule::StageCosts>& table,
                                   schedule::Timeline timeline) {
  const auto& p = sc.program;
  if (p.data_parallel <= 1) return timeline;
  for (int r = 0; r < static_cast<int>(timeline.ranks.size()); ++r) {
    const models::Link link = models::data_group_link(sc.hardware.topology, p.tensor_parallel, p.data_parallel, r);
    std::map<int, double> reduced;  // stage -> when its reduction ends
    std::map<int, std::pair<double, double>> backward;  // stage -> its latest backward's start and length
    double delay = 0;               // how much later than the evaluator's this rank's actions run
    for (auto& a : timeline.ranks[r]) {
      const int s = a.action.stage.value;
      const double length = a.end - a.start;
      a.start += delay;
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
      } else if (a.action.op == schedule::Op::STEP) {
        const double gather = gather_seconds(p, table.at(s), link);  // in the STEP's time, as in sim/
        a.end += gather;
        delay += gather;
      }
    }
  }
  return timeline;
}

}  // namespace pipetwin::twin
