// The data-parallel all-reduce's two algorithms against their closed forms
// (models/collectives.hpp): the tree alone on its links, the ring's and the
// tree's times crossing over as the message grows (auto takes the faster),
// and the choice as the stage costs make it, for the data group and for a
// tensor-parallel group's collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/collectives.hpp"
#include "models/families.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;
using pipetwin::sim::SimInput;

namespace {

pm::Topology links(double latency_s, double bandwidth) {
  pm::Topology t;
  t.kind = pm::TopologyKind::AllToAll;
  t.intra = {latency_s, bandwidth};
  return t;
}

// One stage, D replicas, nothing but one collective of `bytes` over the
// data group (the stage's REDUCE_GRAD run as `algorithm`, in `chunks`).
double collective_alone(int D, double bytes, ps::CollectiveAlgorithm algorithm, int chunks, const pm::Topology& topo) {
  auto p = ps::build_schedule("gpipe", {1, 1, 1, ps::RecomputePolicy::None});
  p.data_parallel = D;
  SimInput in;
  in.program = ps::insert_gradient_reductions(std::move(p));
  ps::StageCosts c;
  c.reduce_bytes = bytes;
  c.reduce_collective = algorithm;
  c.reduce_chunks = chunks;
  in.stages = {c};
  in.topology = topo;
  return pipetwin::sim::simulate(in).timeline.makespan();
}

// The reduction alone: a tree in `chunks` chunks, or a ring (chunks 0).
double reduction_alone(int D, double bytes, int chunks, const pm::Topology& topo) {
  return collective_alone(D, bytes, chunks > 0 ? ps::CollectiveAlgorithm::TreeAllReduce : ps::CollectiveAlgorithm::RingAllReduce,
                          std::max(1, chunks), topo);
}

}  // namespace

// Reduce up a binary tree, then broadcast down, each phase pipelined in C
// chunks: 2(h + C - 1) · (latency + ⌈bytes / C⌉ / bandwidth), h = ⌊log2 D⌋,
// each tree edge on its own link (the slowest replica, a deepest leaf, ends the step).
TEST(Collectives, TreeAllReduceAloneIsTheClosedForm) {
  const pm::Link link{3e-6, 25e9};
  for (const int D : {2, 3, 4, 5, 8, 13}) {
    for (const double bytes : {1e3, 1e8, 3.3e9}) {
      for (const int chunks : {1, 4, 16}) {
        const double got = reduction_alone(D, bytes, chunks, links(link.latency_s, link.bandwidth));
        const double want = pm::tree_all_reduce_seconds(link, bytes, D, chunks);
        EXPECT_NEAR(got, want, 1e-9 * want) << "D=" << D << " bytes=" << bytes << " chunks=" << chunks;
      }
    }
  }
  EXPECT_EQ(pm::tree_depth(1), 0);
  EXPECT_EQ(pm::tree_depth(3), 1);
  EXPECT_EQ(pm::tree_depth(8), 3);
  EXPECT_EQ(pm::tree_depth(13), 3);
}

// Over 16 replicas the tree's 2(4 + C - 1) latencies beat the ring's 30 for
// small messages; the ring's bandwidth term, 2(D-1)/D · bytes / bandwidth,
// beats the tree's, 2(1 + 3/C) · bytes / bandwidth, for large ones. auto takes the tree below the crossing and the ring
// above it, once, and the replay takes the closed form's time either way.
TEST(Collectives, TheChoiceFlipsFromTreeToRingWithSize) {
  const pm::Link link{5e-6, 25e9};
  const int D = 16;
  std::vector<pm::Collective> chosen;
  for (double bytes = 1e3; bytes <= 1e10; bytes *= 10) {
    const auto c = pm::choose_all_reduce(pm::Collective::Auto, link, link, bytes, D);
    if (chosen.empty() || chosen.back() != c) chosen.push_back(c);
    const int chunks = pm::tree_chunks(link, bytes, D);
    const double ring = pm::ring_all_reduce_seconds(link, bytes, D);
    const double tree = pm::tree_all_reduce_seconds(link, bytes, D, chunks);
    EXPECT_EQ(c, tree < ring ? pm::Collective::Tree : pm::Collective::Ring) << bytes;
    const double got = reduction_alone(D, bytes, c == pm::Collective::Tree ? chunks : 0, links(link.latency_s, link.bandwidth));
    EXPECT_NEAR(got, std::min(ring, tree), 1e-9 * std::min(ring, tree)) << bytes;
    // Asked for, each is what it is, whichever is faster.
    EXPECT_EQ(pm::choose_all_reduce(pm::Collective::Ring, link, link, bytes, D), pm::Collective::Ring);
    EXPECT_EQ(pm::choose_all_reduce(pm::Collective::Tree, link, link, bytes, D), pm::Collective::Tree);
  }
  EXPECT_EQ(chosen, (std::vector<pm::Collective>{pm::Collective::Tree, pm::Collective::Ring}));
  // Where it flips (docs/simulation.md): the tree at 1 MB, the ring at 10 MB.
  EXPECT_EQ(pm::choose_all_reduce(pm::Collective::Auto, link, link, 1e6, D), pm::Collective::Tree);
  EXPECT_EQ(pm::choose_all_reduce(pm::Collective::Auto, link, link, 1e7, D), pm::Collective::Ring);
  // Two replicas: the tree (one chunk each way, 2 · bytes / bandwidth) never beats the ring (bytes / bandwidth).
  for (const double bytes : {1.0, 1e3, 1e9}) {
    EXPECT_EQ(pm::choose_all_reduce(pm::Collective::Auto, link, link, bytes, 2), pm::Collective::Ring);
  }
  EXPECT_EQ(pm::parse_collective("tree"), pm::Collective::Tree);
  EXPECT_THROW(pm::parse_collective("butterfly"), pipetwin::Error);
}

namespace {

pm::Hardware ideal(double lat, double bw) {
  pm::Hardware h;
  h.name = h.device.name = "ideal";
  h.device.peak_flops_fp32 = h.device.peak_flops_half = 1e14;
  h.device.memory_bytes = 1e12;
  h.device.memory_bandwidth = 1e12;
  h.topology = links(lat, bw);
  return h;
}

pm::PartitionRequest request(int T, int D, pm::Collective collective, bool zero1 = false) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::None});
  r.program.tensor_parallel = T, r.program.data_parallel = D;
  r.program.zero = zero1 ? 1 : 0;
  r.collective = collective;
  return r;
}

}  // namespace

// The stage costs make the choice: a small model's gradients over 16
// replicas go up a tree, a large one's round a ring; ring and tree when
// asked for; ZeRO-1's reduce-scatter is always a ring. The stage table
// carries the tree's chunk count to the replay.
TEST(Collectives, TheStageCostsChooseEachStagesAlgorithm) {
  const auto hw = ideal(5e-6, 25e9);
  const auto small = pm::transformer_model({2, 64, 256, 4, 16, 100}, pm::Precision::BF16, "small");
  const auto large = pm::transformer_model({8, 2048, 8192, 16, 512, 32000}, pm::Precision::BF16, "large");
  for (const auto* m : {&small, &large}) {
    const int n = static_cast<int>(m->layers.size());
    const pm::StageCostModel c(*m, hw, request(1, 16, pm::Collective::Auto));
    const double bytes = c.reduce_bytes(0, n);
    const pm::Link link = pm::data_group_link(hw.topology, 1, 16, 0);
    EXPECT_EQ(link, hw.topology.intra);
    const auto want = pm::choose_all_reduce(pm::Collective::Auto, link, link, bytes, 16);
    EXPECT_EQ(want, m == &small ? pm::Collective::Tree : pm::Collective::Ring) << bytes;
    EXPECT_EQ(c.reduce_algorithm(0, n, 0), want);
    EXPECT_EQ(c.reduce_collective(0, n, 0),
              want == pm::Collective::Tree ? ps::CollectiveAlgorithm::TreeAllReduce : ps::CollectiveAlgorithm::RingAllReduce);
    EXPECT_EQ(c.reduce_chunks(0, n, 0), want == pm::Collective::Tree ? pm::tree_chunks(link, bytes, 16) : 1);
    const pm::StageCostModel tree(*m, hw, request(1, 16, pm::Collective::Tree));
    EXPECT_EQ(tree.reduce_algorithm(0, n, 0), pm::Collective::Tree);
    EXPECT_EQ(tree.reduce_collective(0, n, 0), ps::CollectiveAlgorithm::TreeAllReduce);
    EXPECT_GT(tree.reduce_chunks(0, n, 0), 0);
    const pm::StageCostModel ring(*m, hw, request(1, 16, pm::Collective::Ring));
    EXPECT_EQ(ring.reduce_collective(0, n, 0), ps::CollectiveAlgorithm::RingAllReduce);
    EXPECT_EQ(ring.reduce_chunks(0, n, 0), 1);
    const pm::StageCostModel zero1(*m, hw, request(1, 16, pm::Collective::Tree, true));
    EXPECT_EQ(zero1.reduce_algorithm(0, n, 0), pm::Collective::Ring);
    EXPECT_EQ(zero1.reduce_collective(0, n, 0), ps::CollectiveAlgorithm::RingReduceScatter);
  }
}

// A tensor-parallel group's all-reduces: auto takes the faster of the ring on
// group_ring_link and the tree on group_tree_link; on a cluster's NVSwitch a
// parent's port carries both children's chunks (half its bandwidth each).
TEST(Collectives, TensorParallelAllReducesTakeTheFasterClosedForm) {
  const auto model = pm::transformer_model({4, 512, 2048, 8, 256, 1000}, pm::Precision::BF16, "t4");
  auto hw = ideal(2e-6, 300e9);
  hw.topology.kind = pm::TopologyKind::Cluster;
  hw.topology.devices_per_host = 8;
  EXPECT_EQ(pm::group_tree_link(hw.topology, 8), (pm::Link{4e-6, 150e9}));
  for (const double bytes : {1e4, 1e6, 1e8}) {
    const double ring = hw.topology.ring_all_reduce_seconds(bytes, 8);
    const pm::Link edge = pm::group_tree_link(hw.topology, 8);
    const double tree = pm::tree_all_reduce_seconds(edge, bytes, 8, pm::tree_chunks(edge, bytes, 8));
    const pm::StageCostModel a(model, hw, request(8, 1, pm::Collective::Auto));
    const pm::StageCostModel r(model, hw, request(8, 1, pm::Collective::Ring));
    const pm::StageCostModel t(model, hw, request(8, 1, pm::Collective::Tree));
    EXPECT_NEAR(a.tp_allreduce_s(bytes), std::min(ring, tree), 1e-12 * ring) << bytes;
    EXPECT_NEAR(r.tp_allreduce_s(bytes), ring, 1e-12 * ring);
    EXPECT_NEAR(t.tp_allreduce_s(bytes), tree, 1e-12 * tree);
  }
  const pm::StageCostModel small(model, hw, request(8, 1, pm::Collective::Ring));
  EXPECT_EQ(small.tp_algorithms(), std::vector<pm::Collective>{pm::Collective::Ring});
  EXPECT_EQ(pm::collective_names({pm::Collective::Tree, pm::Collective::Ring, pm::Collective::Tree}), "ring, tree");
}

// SimGrid's max-min solver leaves residues that grow with the flows sharing a
// link; at a precision tighter than they are it aborts ("Cannot saturate
// more a constraint that has no active element") or crashes. simulate()
// then replays at SimGrid's default precision instead of failing.
TEST(Collectives, AReplayWhoseSolverFailsOnItsRoundingIsReplayedAtTheDefaultPrecision) {
  for (const double precision : {0.0, 1e-13}) {
    auto p = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::None});
    p.data_parallel = 300;
    SimInput in;
    in.program = ps::insert_gradient_reductions(std::move(p));
    ps::StageCosts c;
    c.forward_s = 1e-3;
    c.backward_s = 2e-3;
    c.activation_bytes = c.gradient_bytes = 1e6;
    c.reduce_bytes = 1e8;
    in.stages = {c, c};
    in.topology = pm::preset("dgx-h100").topology;
    in.maxmin_precision = precision;
    const auto result = pipetwin::sim::simulate(in);
    EXPECT_GT(result.timeline.makespan(), 0) << "precision " << precision;
  }
}

namespace {

// PCIe switches of `per_switch` devices: each device one port {latency,
// bandwidth} each way into its switch (non-blocking inside), the switches
// joined through their bridges to the host {latency, bridge_bandwidth}.
pm::Topology switches(int per_switch, double latency_s, double bandwidth, double bridge_bandwidth) {
  pm::Topology t;
  t.kind = pm::TopologyKind::PcieTree;
  t.devices_per_switch = per_switch;
  t.intra = {latency_s, bandwidth};
  t.bridge = {latency_s, bridge_bandwidth};
  return t;
}

// One stage, D replicas, nothing but an all-to-all of `bytes` over the data group.
double all_to_all_alone(int D, double bytes, const pm::Topology& topo) {
  return collective_alone(D, bytes, ps::CollectiveAlgorithm::AllToAll, 1, topo);
}

}  // namespace

// Every member on one switch (full bisection): its n - 1 messages share its
// port both ways, each at bandwidth / (n - 1), so the replay ends at the
// closed form on the route between two members {2 · latency, bandwidth}:
// 2 · latency + (n - 1) · ⌈bytes / n⌉ / bandwidth.
TEST(Collectives, AllToAllOnANonBlockingSwitchIsTheClosedForm) {
  const double lat = 2e-6, bw = 25e9;
  const pm::Link route{2 * lat, bw};
  for (const int D : {2, 3, 4, 8, 16}) {
    for (const double bytes : {1e3, 1e8, 3.3e9}) {
      const double got = all_to_all_alone(D, bytes, switches(16, lat, bw, bw));
      const double want = pm::collective(ps::CollectiveAlgorithm::AllToAll).seconds(route, bytes, D, 1);
      EXPECT_NEAR(got, want, 1e-9 * want) << "D=" << D << " bytes=" << bytes;
    }
  }
}

// Two switches of two members, their bridges at half a port's bandwidth:
// the four messages that leave a switch share its bridge (a quarter of it
// each), so the step waits for the bridge, not the ports: 4 · latency +
// (bytes / 4) / (bridge / 4), twice the bytes / bandwidth, against the
// closed form's 2 · latency + 3/4 · bytes / bandwidth on one switch.
TEST(Collectives, AllToAllAcrossASharedBridgeWaitsForIt) {
  const double lat = 2e-6, bw = 25e9, bytes = 4e8;
  const double got = all_to_all_alone(4, bytes, switches(2, lat, bw, bw / 2));
  EXPECT_NEAR(got, 4 * lat + (bytes / 4) / (bw / 2 / 4), 1e-9 * got);
  const double alone = pm::collective(ps::CollectiveAlgorithm::AllToAll).seconds({2 * lat, bw}, bytes, 4, 1);
  EXPECT_NEAR(alone, 2 * lat + 0.75 * bytes / bw, 1e-12);
  EXPECT_GT(got, 2.5 * alone);
  EXPECT_NEAR(all_to_all_alone(4, bytes, switches(4, lat, bw, bw / 2)), alone, 1e-9 * alone);  // one switch: no bridge
}
