// The timed evaluator (fast path) against the SimGrid replay on a randomized
// grid: every schedule, K up to 64, M up to 256, recompute on and off,
// non-uniform stage costs, finite links, every topology kind. Where the contention check finds no
// shared resource in use, both must agree to 1e-9 relative.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "models/contention.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/interpreter.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

namespace {

std::vector<std::pair<int, int>> stash_peaks(const ps::Program& p, const ps::Timeline& t) {
  ps::StashTracker tracker(p);
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) tracker.apply(a.action);
  }
  std::vector<std::pair<int, int>> out;
  for (int s = 0; s < p.num_stages(); ++s) out.emplace_back(tracker.stage(ps::StageId{s}).peak_full, tracker.stage(ps::StageId{s}).peak_inputs);
  return out;
}

}  // namespace

TEST(FastPath, AgreesWithSimGridWhereverNothingIsShared) {
  std::mt19937 rng(8);
  const std::vector<int> Ks{1, 2, 3, 4, 8, 16, 32, 64}, Ms{1, 2, 3, 4, 8, 16, 32, 64, 128, 256};
  std::uniform_real_distribution<double> time(0.5e-3, 5e-3), bytes(1e4, 5e7), latency(0, 2e-5), bandwidth(1e9, 1e11);
  int agreed = 0, contended = 0, largest = 0;
  std::array<int, 4> agreed_on{};  // per topology kind
  for (int trial = 0; trial < 90; ++trial) {
    const auto& g = ps::generators()[trial % ps::generators().size()];
    int K = Ks[rng() % Ks.size()], M = Ms[rng() % Ms.size()];
    if (trial == 0) K = 64, M = 256;  // the largest corner, once
    while (K * M > 8192 && trial != 0) M /= 2;
    const int V = g.virtual_stages ? 2 : 1;
    if (g.virtual_stages) M = std::max(K, M - M % K);
    if (g.name == "dualpipe-v") M = std::max(M, 2 * K);  // its M >= 2K
    const auto policy = trial % 2 ? ps::RecomputePolicy::Full : ps::RecomputePolicy::None;
    pipetwin::sim::SimInput in;
    in.program = ps::build_schedule(g.name, {K, M, V, policy});
    // Topologies: every pair on its own link, PCIe switches under a shared
    // host bridge, hosts over a network, or one host with a core per rank
    // and one loopback link for every transfer.
    const auto kind = trial == 0 ? pm::TopologyKind::AllToAll : static_cast<pm::TopologyKind>(rng() % 4);
    in.topology.kind = kind;
    in.topology.intra = {latency(rng), bandwidth(rng)};
    in.topology.bridge = {latency(rng), bandwidth(rng)};
    in.topology.inter = {latency(rng), bandwidth(rng)};
    in.topology.devices_per_switch = 1 + static_cast<int>(rng() % 4);
    in.topology.devices_per_host = 1 + static_cast<int>(rng() % 8);
    in.topology.host_cores = K;
    const auto rank = [&](int s) { return in.program.rank_of(ps::StageId{s}).value; };
    const int S = in.program.num_stages();
    for (int s = 0; s < S; ++s) {
      ps::StageCosts c;
      c.forward_s = time(rng), c.input_grad_s = time(rng), c.weight_grad_s = time(rng);
      c.backward_s = c.input_grad_s + c.weight_grad_s, c.recompute_s = c.forward_s, c.step_s = time(rng) / 10;
      c.activation_bytes = std::floor(bytes(rng)), c.gradient_bytes = std::floor(bytes(rng));  // whole bytes, as SimGrid sends
      if (s + 1 < S) c.activation_transfer_s = in.topology.path(rank(s), rank(s + 1)).seconds(c.activation_bytes);
      if (s > 0) c.gradient_transfer_s = in.topology.path(rank(s), rank(s - 1)).seconds(c.gradient_bytes);
      c.blocking_sends = trial % 3 == 1;  // a runtime that waits for each send (StageCosts::blocking_sends)
      in.stages.push_back(c);
    }
    const auto fast = ps::evaluate(in.program, in.stages);
    ASSERT_FALSE(fast.deadlocked());
    const auto check = pm::check_contention(fast.timeline, in.program, in.stages, in.topology);
    if (!check.contention_free) {
      ++contended;
      continue;
    }
    ++agreed_on[static_cast<int>(kind)];
    const auto sim = pipetwin::sim::simulate(in).timeline;
    const double span = fast.timeline.makespan();
    EXPECT_NEAR(sim.makespan(), span, 1e-9 * span) << g.name << " K=" << K << " M=" << M;
    EXPECT_NEAR(sim.bubble_fraction(), fast.timeline.bubble_fraction(), 1e-9) << g.name << " K=" << K << " M=" << M;
    for (int r = 0; r < K; ++r) {
      const double busy = fast.timeline.busy(ps::RankId{r});
      EXPECT_NEAR(sim.busy(ps::RankId{r}), busy, 1e-9 * busy);
    }
    EXPECT_EQ(stash_peaks(in.program, sim), stash_peaks(in.program, fast.timeline));
    largest = std::max(largest, K * M);
    ++agreed;
  }
  EXPECT_GE(agreed, 20);
  EXPECT_GT(contended, 0);  // the grid also holds configurations where links are shared
  EXPECT_EQ(largest, 64 * 256);
  for (int k = 0; k < 4; ++k) {
    const std::string kind(pm::topology_name(static_cast<pm::TopologyKind>(k)));
    EXPECT_GT(agreed_on[k], 0) << kind;
    RecordProperty("agreed on " + kind, agreed_on[k]);
  }
  RecordProperty("agreed", agreed);
  RecordProperty("contended", contended);
}

TEST(FastPath, ContentionIsFoundOnSharedLinksAndCores) {
  pipetwin::sim::SimInput in;
  in.program = ps::build_schedule("gpipe", {2, 4});
  ps::StageCosts c;
  c.forward_s = c.backward_s = 1e-3;
  c.activation_transfer_s = c.gradient_transfer_s = 5e-3;  // slower than compute: transfers pile up on the link
  in.stages.assign(2, c);
  in.topology.kind = pm::TopologyKind::AllToAll;
  in.topology.intra = {0, 1e9};
  const auto fast = ps::evaluate(in.program, in.stages);
  const auto check = pm::check_contention(fast.timeline, in.program, in.stages, in.topology);
  EXPECT_FALSE(check.contention_free);
  EXPECT_NE(check.reason.find("share link dev0-dev1"), std::string::npos) << check.reason;

  in.topology.kind = pm::TopologyKind::SharedHost;
  in.topology.host_cores = 1;
  c.activation_transfer_s = c.gradient_transfer_s = 0;
  in.stages.assign(2, c);
  const auto shared = ps::evaluate(in.program, in.stages);
  const auto cores = pm::check_contention(shared.timeline, in.program, in.stages, in.topology);
  EXPECT_FALSE(cores.contention_free);
  EXPECT_NE(cores.reason.find("2 ranks compute at once"), std::string::npos) << cores.reason;
}

// A runtime that waits for its sends: GPipe, K = 2, M = 2, forwards of 1 ms,
// a flight of 0.5 ms. Rank 0's first SEND_F lasts the flight, so its second
// forward starts at 1.5 ms and arrives at 3 ms, where a posted send lets it
// start at 1 ms and arrive at 2.5 ms. Both engines, the same times.
TEST(FastPath, BlockingSendsWaitForTheirFlight) {
  for (const bool blocking : {false, true}) {
    pipetwin::sim::SimInput in;
    in.program = ps::build_schedule("gpipe", {2, 2, 1, ps::RecomputePolicy::None});
    in.topology.kind = pm::TopologyKind::AllToAll;
    in.topology.intra = {0, 2e9};
    for (int s = 0; s < 2; ++s) {
      ps::StageCosts c;
      c.forward_s = 1e-3, c.backward_s = 2e-3, c.input_grad_s = 1e-3, c.weight_grad_s = 1e-3, c.recompute_s = 1e-3;
      c.activation_bytes = c.gradient_bytes = 1e6;  // 0.5 ms at 2 GB/s
      c.activation_transfer_s = c.gradient_transfer_s = 0.5e-3;
      c.blocking_sends = blocking;
      in.stages.push_back(c);
    }
    const auto fast = ps::evaluate(in.program, in.stages).timeline;
    const auto sim = pipetwin::sim::simulate(in).timeline;
    for (const auto* t : {&fast, &sim}) {
      double send0 = -1, second_forward = -1;
      for (const auto& a : t->ranks[0]) {
        if (a.action.op == ps::Op::SEND_F && a.action.microbatch->value == 0) send0 = a.end - a.start;
      }
      for (const auto& a : t->ranks[1]) {
        if (a.action.op == ps::Op::F && a.action.microbatch->value == 1) second_forward = a.start;
      }
      EXPECT_NEAR(send0, blocking ? 0.5e-3 : 0, 1e-12) << blocking;
      EXPECT_NEAR(second_forward, blocking ? 3e-3 : 2.5e-3, 1e-12) << blocking;
    }
    EXPECT_NEAR(sim.makespan(), fast.makespan(), 1e-9 * fast.makespan());
  }
}

// The contention check places a blocking send's flight at the end of its
// action. On one shared link: rank 0's SEND_F flies [2, 3] ms (its action
// [1, 3]: 1 ms of its own, then the flight), rank 1's SEND_B [2, 2.5]: they
// overlap. Were the flights placed after the actions ([3, 4] and [2.5, 3]),
// they would not.
TEST(FastPath, ABlockingSendsFlightEndsItsAction) {
  const auto program = ps::build_schedule("gpipe", {2, 1, 1, ps::RecomputePolicy::None});
  pm::Topology topo;
  topo.kind = pm::TopologyKind::SharedHost;
  topo.host_cores = 2;
  topo.intra = {0, 1e9};
  std::vector<ps::StageCosts> costs(2);
  for (auto& c : costs) c.blocking_sends = true;
  costs[0].activation_transfer_s = 1e-3;
  costs[1].gradient_transfer_s = 0.5e-3;
  ps::Timeline t;
  t.ranks.resize(2);
  t.ranks[0].push_back({ps::make_action(ps::Op::SEND_F, 0, 0), 1e-3, 3e-3});
  t.ranks[1].push_back({ps::make_action(ps::Op::SEND_B, 1, 0), 1.5e-3, 2.5e-3});
  EXPECT_FALSE(pm::check_contention(t, program, costs, topo).contention_free);
  for (auto& c : costs) c.blocking_sends = false;  // posted: flights [3, 4] and [2.5, 3]
  EXPECT_TRUE(pm::check_contention(t, program, costs, topo).contention_free)
      << pm::check_contention(t, program, costs, topo).reason;
}
