// FSDP's UNSHARD and RESHARD under a pipeline (ZeRO-3 keeping each stage's
// weights between uses, as torchtitan runs it): in SimGrid, an UNSHARD is a
// ring all-gather of the stage's weights over its data group, started where
// it stands and waited for by the stage's next compute; RESHARD takes no
// time. Against the closed form written out here, (D - 1)(latency +
// ⌈bytes / D⌉ / bandwidth) per gather, alone on its links.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;
using pipetwin::sim::SimInput;

namespace {

constexpr double kLatency = 2e-6, kBandwidth = 20e9, kWeights = 1e9;
constexpr double kForward = 0.010, kBackward = 0.020;

double ring_gather_s(int D, double bytes) { return (D - 1) * (kLatency + std::ceil(bytes / D) / kBandwidth); }

// One rank holding V stages (looped BFS: every forward of a stage, then the
// next stage's), D replicas under ZeRO-3 without resharding, FSDP's actions
// placed with at most `active` stages gathered.
SimInput looped(int V, int M, int D, int active) {
  auto p = ps::lower(ps::generate("looped-bfs", {1, M, V}));
  p.data_parallel = D, p.zero = 3, p.reshard_after_forward = false;
  SimInput in;
  in.program = ps::insert_unshards(ps::insert_gradient_reductions(std::move(p)), active);
  ps::validate(in.program);
  for (int s = 0; s < in.program.num_stages(); ++s) {
    ps::StageCosts c;
    c.forward_s = kForward, c.backward_s = kBackward;
    c.unshard_bytes = kWeights;  // no gradients to reduce: the gathers alone on the links
    in.stages.push_back(c);
  }
  in.topology.kind = pm::TopologyKind::AllToAll;
  in.topology.intra = {kLatency, kBandwidth};
  return in;
}

std::vector<ps::TimedAction> of(const ps::Timeline& t, ps::Op op) {
  std::vector<ps::TimedAction> out;
  for (const auto& a : t.ranks.at(0)) {
    if (a.action.op == op) out.push_back(a);
  }
  return out;
}

// The first compute of `stage` after time `after`.
const ps::TimedAction& next_compute(const ps::Timeline& t, int stage, double after) {
  for (const auto& a : t.ranks.at(0)) {
    if (ps::is_compute(a.action.op) && a.action.stage.value == stage && a.start >= after - 1e-12) return a;
  }
  throw std::runtime_error("no compute of stage " + std::to_string(stage) + " after " + std::to_string(after));
}

}  // namespace

// One stage gathered at a time: each UNSHARD runs alone, takes the ring's
// closed form, and the stage's next compute starts when it ends; the step is
// the compute plus every gather (three for two stages: stage 0 again for its
// backwards).
TEST(Unshard, AGatherAloneIsTheRingAndTheComputeWaitsForIt) {
  for (const int D : {2, 4}) {
    const int V = 2, M = 2;
    const auto t = pipetwin::sim::simulate(looped(V, M, D, 1)).timeline;
    const auto unshards = of(t, ps::Op::UNSHARD);
    ASSERT_EQ(unshards.size(), 3u) << D;
    const double g = ring_gather_s(D, kWeights);
    for (const auto& u : unshards) {
      EXPECT_NEAR(u.end - u.start, g, 1e-9 * g) << ps::to_string(u.action) << " D=" << D;
      EXPECT_NEAR(next_compute(t, u.action.stage.value, u.start).start, u.end, 1e-9) << ps::to_string(u.action);
    }
    for (const auto& r : of(t, ps::Op::RESHARD)) EXPECT_EQ(r.end, r.start);
    const double compute = V * M * (kForward + kBackward);
    EXPECT_NEAR(t.makespan(), compute + 3 * g, 1e-9 * t.makespan()) << D;
  }
}

// Both stages gathered from the start (N >= V): stage 1's gather runs under
// stage 0's forwards, so only stage 0's is exposed (both share the links
// meanwhile) and nothing is gathered twice.
TEST(Unshard, ASecondStagesGatherHidesUnderTheFirstOnesCompute) {
  const int V = 2, M = 2, D = 2;
  const auto one = pipetwin::sim::simulate(looped(V, M, D, 1)).timeline;
  const auto two = pipetwin::sim::simulate(looped(V, M, D, 2)).timeline;
  const auto unshards = of(two, ps::Op::UNSHARD);
  ASSERT_EQ(unshards.size(), 2u);
  EXPECT_EQ(unshards[0].start, 0);
  EXPECT_EQ(unshards[1].start, 0);
  const double g = ring_gather_s(D, kWeights);
  // Sharing the links, each takes longer than alone, at most twice as long.
  EXPECT_GT(unshards[0].end, g);
  EXPECT_LE(unshards[0].end, 2 * g + 1e-9);
  EXPECT_NEAR(next_compute(two, 0, 0).start, unshards[0].end, 1e-9);
  const double compute = V * M * (kForward + kBackward);
  EXPECT_NEAR(two.makespan(), unshards[0].end + compute, 1e-9 * two.makespan());
  EXPECT_LT(two.makespan(), one.makespan());
}
