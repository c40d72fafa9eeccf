// Expert parallelism's all-to-alls in the SimGrid replay: each routed
// layer's dispatch and combine as the messages of an all-to-all between the
// expert group's E replicas, on the platform's routes. Alone on an NVSwitch
// node (every GPU its own port) and through NICs, shared or not, each is
// models::all_to_all's closed form; a PCIe bridge that several GPUs' sends
// cross, which the closed form does not see, slows the messages; an
// OVERLAP_F_B (DualPipe-V) runs an action's all-to-alls beside its compute.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "models/collectives.hpp"
#include "models/topology.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;
using pipetwin::sim::SimInput;

namespace {

constexpr double kCompute = 2e-3;  // each F's and B's compute, its all-to-alls apart
constexpr double kBytes = 4e8;     // what each all-to-all sends from a device (divides by every E here)
constexpr int kExchanges = 4;      // two routed layers: each one's dispatch and combine

// One cluster node of G GPUs and N NICs per node (fat-tree, one pod).
pm::Topology cluster(int G, int N) {
  pm::Topology t;
  t.kind = pm::TopologyKind::Cluster;
  t.devices_per_host = G;
  t.nics_per_host = N;
  t.intra = {1e-6, 4.5e11};  // an NVSwitch port
  t.inter = {3e-6, 5e10};    // a 400 Gb/s NIC
  return t;
}

// K stages of `schedule` over D replicas, experts over groups of E, each F
// and B (and I) `kExchanges` all-to-alls of kBytes, each taking `x` in the
// stage costs (their closed form, as models/ puts it there).
SimInput experts(const std::string& schedule, int K, int M, int D, int E, const pm::Topology& topology, double x) {
  SimInput in;
  const int V = schedule == "dualpipe-v" || schedule == "interleaved-1f1b" || schedule == "combined-1f1b" ? 2 : 1;
  in.program = ps::build_schedule(schedule, {K, M, V, ps::RecomputePolicy::None});
  in.program.data_parallel = D;
  in.program.expert_parallel = E;
  in.program = ps::insert_gradient_reductions(std::move(in.program));
  ps::StageCosts c;
  c.a2a_forward_s = c.a2a_backward_s = c.a2a_recompute_s = kExchanges * x;
  c.forward_s = kCompute + c.a2a_forward_s;
  c.input_grad_s = kCompute / 2 + c.a2a_backward_s;
  c.weight_grad_s = kCompute / 2;
  c.backward_s = c.input_grad_s + c.weight_grad_s;
  c.a2a_exchanges = kExchanges;
  c.a2a_bytes = kBytes;
  in.stages.assign(in.program.num_stages(), c);
  in.topology = topology;
  return in;
}

// Each timed `op` of the timeline's ranks, end - start.
std::vector<double> durations(const ps::Timeline& t, ps::Op op) {
  std::vector<double> out;
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) {
      if (a.action.op == op && !a.action.overlapped) out.push_back(a.end - a.start);
    }
  }
  return out;
}

}  // namespace

// Every GPU of the group on one node, each its own NVSwitch port: the
// messages of each all-to-all take the closed form, latency + (E - 1)/E of
// the bytes through the port, and every F and B its compute plus four of them.
TEST(Experts, AllToAllsOnANodesPortsAreTheClosedForm) {
  for (const int E : {2, 4, 8}) {
    const auto topology = cluster(8, 8);
    const double x = pm::all_to_all(topology, 1, E, 0, E).seconds(kBytes);
    EXPECT_NEAR(x, 2e-6 + (E - 1) * kBytes / E / 4.5e11, 1e-15) << "E=" << E;
    const auto t = pipetwin::sim::simulate(experts("gpipe", 1, 3, E, E, topology, x)).timeline;
    const auto f = durations(t, ps::Op::F), b = durations(t, ps::Op::B);
    ASSERT_EQ(f.size(), 3u);
    ASSERT_EQ(b.size(), 3u);
    for (const double d : f) EXPECT_NEAR(d, kCompute + kExchanges * x, 1e-9 * d) << "E=" << E;
    for (const double d : b) EXPECT_NEAR(d, kCompute + kExchanges * x, 1e-9 * d) << "E=" << E;
    EXPECT_NEAR(t.makespan(), 3 * (2 * kCompute + 2 * kExchanges * x), 1e-9 * t.makespan()) << "E=" << E;
  }
}

// Nodes of two GPUs over four members: each GPU sends half its bytes off
// the node. With a NIC each, through its own; with one NIC for the two, the
// NIC carries both GPUs' off-node bytes, kBytes in all, and each all-to-all
// takes 2 NIC latencies + kBytes / NIC bandwidth, twice the transfer: in the
// closed form (models::all_to_all counts the GPUs on the NIC) and in the
// replay's messages alike.
TEST(Experts, TwoGpusOnOneNicShareItsBandwidth) {
  for (const auto& [N, want] : std::vector<std::pair<int, double>>{{2, 6e-6 + kBytes / 2 / 5e10}, {1, 6e-6 + kBytes / 5e10}}) {
    const double x = pm::all_to_all(cluster(2, N), 1, 4, 0, 4).seconds(kBytes);
    EXPECT_NEAR(x, want, 1e-15) << "N=" << N;
    const auto t = pipetwin::sim::simulate(experts("gpipe", 1, 2, 4, 4, cluster(2, N), x)).timeline;
    for (const double d : durations(t, ps::Op::F)) EXPECT_NEAR(d, kCompute + kExchanges * x, 1e-9 * d) << "N=" << N;
    for (const double d : durations(t, ps::Op::B)) EXPECT_NEAR(d, kCompute + kExchanges * x, 1e-9 * d) << "N=" << N;
  }
}

// What only the messages see: a PCIe tree of two GPUs a switch, four
// members, the bridges at half a port's bandwidth. The closed form charges
// each route's narrowest hop to the sender's port alone: 1/4 of kBytes at
// the port's bandwidth and 1/2 at the bridge's, 5/4 of kBytes / port
// bandwidth. The bridge above a switch carries both its GPUs' sends across
// it, four messages of kBytes / 4 at a quarter of it each, so each
// all-to-all takes its route's latency + 2 kBytes / port bandwidth.
TEST(Experts, APcieBridgeCarriesEverySendAcrossIt) {
  pm::Topology tree;
  tree.kind = pm::TopologyKind::PcieTree;
  tree.devices_per_switch = 2;
  tree.intra = {1e-6, 2.4e10};
  tree.bridge = {2e-6, 1.2e10};
  const double latency = 2 * 1e-6 + 2 * 2e-6;
  const double x = pm::all_to_all(tree, 1, 4, 0, 4).seconds(kBytes);
  EXPECT_NEAR(x, latency + 1.25 * kBytes / 2.4e10, 1e-12);
  const double shared = latency + 2 * kBytes / 2.4e10;
  const auto t = pipetwin::sim::simulate(experts("gpipe", 1, 2, 4, 4, tree, x)).timeline;
  for (const double d : durations(t, ps::Op::F)) EXPECT_NEAR(d, kCompute + kExchanges * shared, 1e-9 * d);
  for (const double d : durations(t, ps::Op::B)) EXPECT_NEAR(d, kCompute + kExchanges * shared, 1e-9 * d);
}

// Two expert groups of two (D = 4, E = 2): each group's all-to-all among
// its own replicas, apart from the other's, as alone.
TEST(Experts, EachGroupExchangesAmongItsOwnReplicas) {
  const auto topology = cluster(8, 8);
  const double x = pm::all_to_all(topology, 1, 4, 0, 2).seconds(kBytes);
  EXPECT_NEAR(x, 2e-6 + kBytes / 2 / 4.5e11, 1e-15);
  const auto t = pipetwin::sim::simulate(experts("1f1b", 2, 4, 4, 2, topology, x)).timeline;
  const auto f = durations(t, ps::Op::F);
  ASSERT_EQ(f.size(), 8u);
  for (const double d : f) EXPECT_NEAR(d, kCompute + kExchanges * x, 1e-9 * d);
}

// DualPipe-V: an OVERLAP_F_B's two halves run their all-to-alls on a
// stream of their own beside the compute, and the pair takes the closed
// form, max(the computes, the all-to-alls, either alone), as the evaluator
// has it: here the all-to-alls (8x) are nearly the computes (4 ms), and
// each half's all-to-alls more than what the second half adds.
TEST(Experts, OverlappedPairsRunTheirAllToAllsBesideTheCompute) {
  const auto topology = cluster(8, 8);
  const double x = pm::all_to_all(topology, 1, 2, 0, 2).seconds(kBytes);
  const auto in = experts("dualpipe-v", 2, 8, 2, 2, topology, x);
  const auto t = pipetwin::sim::simulate(in).timeline;
  const ps::StageCosts& c = in.stages[0];
  const double f = c.forward_s, b = c.backward_s, af = c.a2a_forward_s, ab = c.a2a_backward_s;
  const double pair = std::max({f - af + b - ab, af + ab, f, b});
  int overlaps = 0;
  for (const auto& rank : t.ranks) {
    for (std::size_t k = 1; k < rank.size(); ++k) {
      if (!rank[k].action.overlapped) continue;
      ++overlaps;
      EXPECT_NEAR(rank[k].end - rank[k - 1].start, pair, 1e-9 * pair) << ps::to_string(rank[k].action);
    }
  }
  EXPECT_GT(overlaps, 0);
}

// Megatron-LM's combined 1F1B (-s combined-1f1b): each steady-state forward
// and the backward after it one OVERLAP_F_B, so that one micro-batch's
// all-to-alls hide under the other's compute. With all-to-alls a third of
// each pass, it is shorter than interleaved-1f1b on the same costs, its
// pairs take the closed form where their compute covers them, and with
// E = 1 (no messages: the closed form inside the actions) SimGrid and the
// evaluator agree.
TEST(Experts, CombinedOneFOneBHidesOneMicrobatchsAllToAllsUnderTheOthers) {
  const auto topology = cluster(8, 8);
  const double x = pm::all_to_all(topology, 1, 2, 0, 2).seconds(kBytes);
  const auto plain = experts("interleaved-1f1b", 2, 8, 2, 2, topology, x);
  auto in = experts("combined-1f1b", 2, 8, 2, 2, topology, x);
  const double interleaved = pipetwin::sim::simulate(plain).timeline.makespan();
  const auto t = pipetwin::sim::simulate(in).timeline;
  EXPECT_LT(t.makespan(), interleaved * 0.9);
  const ps::StageCosts& c = in.stages[0];
  const double pair = std::max({c.forward_s - c.a2a_forward_s + c.backward_s - c.a2a_backward_s,
                                c.a2a_forward_s + c.a2a_backward_s, c.forward_s, c.backward_s});
  int overlaps = 0;
  for (const auto& rank : t.ranks) {
    for (std::size_t k = 1; k < rank.size(); ++k) {
      if (!rank[k].action.overlapped) continue;
      ++overlaps;
      EXPECT_NEAR(rank[k].end - rank[k - 1].start, pair, 1e-9 * pair) << ps::to_string(rank[k].action);
    }
  }
  EXPECT_GT(overlaps, 0);
  // One replica, the same costs, instant transfers: both engines take the closed form.
  in.program.data_parallel = 1;
  in.program.expert_parallel = 1;
  in.topology = pm::Topology{};
  in.topology.intra = {0, 1e300};
  const auto simulated = pipetwin::sim::simulate(in).timeline.makespan();
  EXPECT_NEAR(ps::evaluate(in.program, in.stages).timeline.makespan(), simulated, 1e-9 * simulated);
}

// The sends a step (every member's, E - 1 an all-to-all): gpipe over one
// stage, 3 micro-batches, 4 all-to-alls in each F and B, E = D = 4: 3 x 2 x 4
// x 3 x 4 = 288. Beyond sim::kMaxExchangeSends the replay keeps them as
// their closed forms inside the actions: on the PCIe tree above, whose bridge
// only the messages see, each F then takes its stage costs' time.
TEST(Experts, TheReplayCountsItsSendsAndKeepsTheClosedFormBeyondItsBudget) {
  pm::Topology tree;
  tree.kind = pm::TopologyKind::PcieTree;
  tree.devices_per_switch = 2;
  tree.intra = {1e-6, 2.4e10};
  tree.bridge = {2e-6, 1.2e10};
  const double x = pm::all_to_all(tree, 1, 4, 0, 4).seconds(kBytes);
  auto in = experts("gpipe", 1, 3, 4, 4, tree, x);
  EXPECT_EQ(pipetwin::sim::exchange_sends(in.program, in.stages, in.topology), 288);
  in.topology.kind = pm::TopologyKind::AllToAll;  // a link per pair: no messages
  EXPECT_EQ(pipetwin::sim::exchange_sends(in.program, in.stages, in.topology), 0);
  in.topology.kind = pm::TopologyKind::PcieTree;
  // As many all-to-alls again, each a 10,000th of the time: the same closed
  // form, 10,000 times the sends.
  for (auto& c : in.stages) {
    c.a2a_exchanges *= 10000;
    c.a2a_bytes /= 10000;
  }
  EXPECT_EQ(pipetwin::sim::exchange_sends(in.program, in.stages, in.topology), 2'880'000);
  ASSERT_GT(2'880'000, pipetwin::sim::kMaxExchangeSends);
  const auto t = pipetwin::sim::simulate(in).timeline;
  for (const double d : durations(t, ps::Op::F)) EXPECT_NEAR(d, kCompute + kExchanges * x, 1e-9 * d);
}
