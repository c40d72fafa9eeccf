// Expert parallelism's all-to-alls as SimGrid messages (sim/exchanges.hpp).
#include "sim/exchanges.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/collectives.hpp"
#include "sim/collectives.hpp"

namespace sg4 = simgrid::s4u;
namespace ps = pipetwin::schedule;

namespace pipetwin::sim {

// The pair's start, the first half's own time and all-to-alls' closed form,
// when the stream ended the first half's and all of them (-1: not yet).
struct ExpertExchanges::Pair {
  double start = 0, first_s = 0, first_a2a = 0;
  double first_done = -1, all_done = -1;
  sg4::ActorPtr stream;
};

namespace {

// The all-to-alls of `op` that run as messages, whatever their number.
int messages(const ps::Program& p, const models::Topology& topology, const ps::StageCosts& costs, ps::Op op) {
  // With a link per pair (all-to-all, inside a multi-host's host) every flow
  // would have a link of its own, E - 1 times as fast as through any
  // switch; a shared host's is a calibrated cost; folded in, the members
  // inside one replica's tensor group have no route of their own.
  const auto kind = topology.kind;
  if ((kind != models::TopologyKind::Cluster && kind != models::TopologyKind::PcieTree) || p.expert_replicas() <= 1 ||
      p.folds_experts() || costs.a2a_bytes <= 0) {
    return 0;
  }
  return costs.exchanges(op);
}

}  // namespace

std::int64_t exchange_sends(const ps::Program& program, const std::vector<ps::StageCosts>& stages,
                            const models::Topology& topology) {
  if (program.expert_replicas() <= 1) return 0;
  std::int64_t sends = 0;
  for (const auto& rank : program.ranks) {
    for (const auto& a : rank) {
      if (ps::is_compute(a.op)) sends += messages(program, topology, stages.at(a.stage.value), a.op);
    }
  }
  return sends * (program.expert_replicas() - 1) * program.data_parallel;
}

int ExpertExchanges::count(const ps::StageCosts& costs, ps::Op op) const {
  return on_ ? messages(in_.program, in_.topology, costs, op) : 0;
}

void ExpertExchanges::all_to_alls(const ps::Action& a, int n) const {
  const auto& costs = in_.stages.at(a.stage.value);
  const int E = in_.program.expert_replicas();
  const auto& entry = models::collective(ps::CollectiveAlgorithm::AllToAll);
  // Per stage: its group's members post their all-to-alls in one order.
  const std::string tag = "X" + std::to_string(a.stage.value);
  for (int i = 0; i < n; ++i) run_collective(entry, tag, replica_ / E, replica_ % E, E, costs.a2a_bytes, 1);
}

void ExpertExchanges::inline_run(const ps::Action& a, double d, const std::function<void(double)>& run) const {
  const auto& costs = in_.stages.at(a.stage.value);
  const int n = count(costs, a.op);
  const double piece = std::max(0.0, d - std::min(costs.of(a), costs.a2a_share(a.op))) / (n + 1);
  for (int i = 0; i <= n; ++i) {
    if (piece > 0) run(piece);
    if (i < n) all_to_alls(a, 1);
  }
}

bool ExpertExchanges::opens_pair(const ps::Action& a, const ps::Action& next) const {
  if (a.overlapped || !next.overlapped || !ps::is_compute(a.op) || !ps::is_compute(next.op)) return false;
  return count(in_.stages.at(a.stage.value), a.op) > 0 || count(in_.stages.at(next.stage.value), next.op) > 0;
}

ps::TimedAction ExpertExchanges::open(const ps::Action& a, const ps::Action& next) {
  const auto& costs = in_.stages.at(a.stage.value);
  auto pair = std::make_shared<Pair>();
  pair->start = sg4::Engine::get_clock();
  pair->first_s = costs.of(a);
  pair->first_a2a = std::min(pair->first_s, costs.a2a_share(a.op));
  const int first = count(costs, a.op), second = count(in_.stages.at(next.stage.value), next.op);
  Pair* p = pair.get();
  pair->stream = sg4::Actor::create("a2a" + std::to_string(a.stage.value) + "/" + std::to_string(replica_),
                                    sg4::this_actor::get_host(), [this, p, a, next, first, second] {
                                      all_to_alls(a, first);
                                      p->first_done = sg4::Engine::get_clock();
                                      all_to_alls(next, second);
                                      p->all_done = sg4::Engine::get_clock();
                                    });
  pair_ = pair;  // alive until close() has joined its stream
  // Timed as the evaluator times it (its own time); the rank goes on to the
  // second half at once, whose end is the pair's.
  return {a, pair->start, pair->start + pair->first_s};
}

ps::TimedAction ExpertExchanges::close(const ps::Action& b, double d) {
  const auto pair = std::move(pair_);
  pair->stream->join();
  const auto& costs = in_.stages.at(b.stage.value);
  const double own = costs.of(b), own_a2a = std::min(own, costs.a2a_share(b.op));
  const double first_compute = pair->first_s - pair->first_a2a, second_compute = own - own_a2a;
  const double xf = pair->first_done - pair->start, xb = pair->all_done - pair->first_done;
  const double closed = std::max({first_compute + second_compute, pair->first_a2a + own_a2a, pair->first_s, own});
  const double measured = std::max({first_compute + second_compute, xf + xb, first_compute + xf, second_compute + xb});
  const double end = pair->start + pair->first_s + d + std::max(0.0, measured - closed);
  if (end > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(end);
  return {b, pair->start + pair->first_s, sg4::Engine::get_clock()};
}

}  // namespace pipetwin::sim
