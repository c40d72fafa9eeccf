// Gradient buckets (DDP's bucket_cap_mb, Megatron-LM's --overlap-grad-reduce):
// the stage's gradients cut into buckets as its last backward produces them,
// each reduced from then on, one after the other. In SimGrid against the
// closed form written out here: a ring all-reduce per bucket, each from
// max(when it is ready, when the one before it ends).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/collectives.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;
using pipetwin::sim::SimInput;

namespace {

constexpr double kLatency = 2e-6, kBandwidth = 20e9;

double ring_allreduce_s(int D, double bytes) {
  return 2.0 * (D - 1) * (std::ceil(bytes / D) / kBandwidth + kLatency);
}

SimInput one_stage(const std::string& schedule, int K, int M, int D, double grads, double cap) {
  SimInput in;
  auto p = ps::build_schedule(schedule, {K, M, 1, ps::RecomputePolicy::None});
  p.data_parallel = D;
  in.program = ps::insert_gradient_reductions(std::move(p));
  for (int s = 0; s < in.program.num_stages(); ++s) {
    ps::StageCosts c;
    c.forward_s = 0.010, c.backward_s = 0.020, c.input_grad_s = 0.012, c.weight_grad_s = 0.008;
    c.reduce_bytes = grads;
    c.reduce_bucket_bytes = cap;
    in.stages.push_back(c);
  }
  in.topology.kind = pm::TopologyKind::AllToAll;
  in.topology.intra = {kLatency, kBandwidth};
  return in;
}

// The rank's last `op` of `stage`.
const ps::TimedAction& find(const ps::Timeline& t, int rank, ps::Op op, int stage) {
  const ps::TimedAction* found = nullptr;
  for (const auto& a : t.ranks.at(rank)) {
    if (a.action.op == op && a.action.stage.value == stage) found = &a;
  }
  if (found == nullptr) throw std::runtime_error("no " + std::string(ps::op_name(op)) + " of stage " + std::to_string(stage));
  return *found;
}

}  // namespace

TEST(GradientBuckets, CutInOrderWithTheShareOfTheBackwardThatProducesThem) {
  const auto b = pm::gradient_buckets(100, 30);
  ASSERT_EQ(b.size(), 4u);
  const double bytes[] = {30, 30, 30, 10}, ready[] = {0.3, 0.6, 0.9, 1.0};
  for (std::size_t i = 0; i < b.size(); ++i) {
    EXPECT_DOUBLE_EQ(b[i].bytes, bytes[i]);
    EXPECT_NEAR(b[i].ready, ready[i], 1e-15);
  }
  for (const double cap : {0.0, 100.0, 1e9}) {
    const auto one = pm::gradient_buckets(100, cap);
    ASSERT_EQ(one.size(), 1u) << cap;
    EXPECT_EQ(one[0].bytes, 100);
    EXPECT_EQ(one[0].ready, 1);
  }
  EXPECT_TRUE(pm::gradient_buckets(0, 30).empty());
  EXPECT_EQ(pm::gradient_buckets(90, 30).size(), 3u);  // an exact multiple: no empty last bucket
  // One stream: 10 s each, ready at 3, 6, 9 and 10 s of a 10 s backward from 5.
  EXPECT_DOUBLE_EQ(pm::bucketed_reduce_end(b, 5, 10, [](double) { return 10.0; }), 5 + 3 + 4 * 10);
  // Fast buckets: each ends before the next is ready; the last one after the backward.
  EXPECT_DOUBLE_EQ(pm::bucketed_reduce_end(b, 5, 10, [](double x) { return x / 100; }), 15 + 0.1);
  // The stream busy until 100 with earlier reductions: every bucket ready by then, back to back.
  EXPECT_DOUBLE_EQ(pm::bucketed_reduce_end(b, 5, 10, [](double x) { return x / 100; }, 100), 100 + 1.0);
}

// GPipe on one stage, D replicas: the REDUCE_GRAD that SimGrid times runs
// from the last backward's start to the closed form's end, whether the
// network keeps up with the backward (only the last bucket exposed) or not
// (the first ready, then every bucket back to back).
TEST(GradientBuckets, SimGridStartsThemDuringTheLastBackward) {
  for (const int D : {2, 4}) {
    for (const double grads : {2e8, 4e9}) {  // 0.01-0.015 s and 0.2-0.3 s of ring for the whole
      const double cap = grads / 4;
      const auto t = pipetwin::sim::simulate(one_stage("gpipe", 1, 2, D, grads, cap)).timeline;
      const auto& b = find(t, 0, ps::Op::B, 0);  // the last backward
      const auto& r = find(t, 0, ps::Op::REDUCE_GRAD, 0);
      double end = b.start;
      for (int i = 0; i < 4; ++i) end = std::max(end, b.start + 0.25 * (i + 1) * (b.end - b.start)) + ring_allreduce_s(D, cap);
      EXPECT_NEAR(r.start, b.start, 1e-12) << "D=" << D << " grads=" << grads;
      EXPECT_NEAR(r.end, end, 1e-9 * end) << "D=" << D << " grads=" << grads;
      // The step's optimizer waits for it.
      EXPECT_GE(find(t, 0, ps::Op::STEP, 0).start, r.end - 1e-12);
      // Against one reduction after the backward: earlier by the overlap.
      const auto whole = pipetwin::sim::simulate(one_stage("gpipe", 1, 2, D, grads, 0)).timeline;
      const auto& r1 = find(whole, 0, ps::Op::REDUCE_GRAD, 0);
      EXPECT_NEAR(r1.end, b.end + ring_allreduce_s(D, grads), 1e-9 * r1.end);
      EXPECT_LT(t.makespan(), whole.makespan());
    }
  }
}

// Zero-bubble's deferred weight gradients produce the gradients: each
// stage's buckets start with its last W, on every rank, and the step ends.
TEST(GradientBuckets, WithSplitBackwardsTheLastWeightGradientStartsThem) {
  const auto in = one_stage("zb-h1", 2, 4, 2, 4e8, 1e8);
  const auto t = pipetwin::sim::simulate(in).timeline;
  for (int s = 0; s < 2; ++s) {
    const auto& w = find(t, s, ps::Op::W, s);  // the last weight gradient
    const auto& r = find(t, s, ps::Op::REDUCE_GRAD, s);
    EXPECT_NEAR(r.start, w.start, 1e-12) << "stage " << s;
    EXPECT_GT(r.end, w.end) << "stage " << s;
    EXPECT_GE(find(t, s, ps::Op::STEP, s).start, r.end - 1e-12);
  }
}

// DDP's first bucket (1 MiB) apart: the rest cut as before, the first ready
// at its share of the backward; in SimGrid as in the closed form.
TEST(GradientBuckets, TheFirstBucketApart) {
  const auto b = pm::gradient_buckets(100, 30, 5);
  ASSERT_EQ(b.size(), 5u);
  const double bytes[] = {5, 30, 30, 30, 5}, ready[] = {0.05, 0.35, 0.65, 0.95, 1.0};
  for (std::size_t i = 0; i < b.size(); ++i) {
    EXPECT_DOUBLE_EQ(b[i].bytes, bytes[i]);
    EXPECT_NEAR(b[i].ready, ready[i], 1e-15);
  }
  EXPECT_EQ(pm::gradient_buckets(100, 200, 5).size(), 2u);  // the rest in one
  EXPECT_EQ(pm::gradient_buckets(100, 30, 100).size(), 4u);  // a first cap of all: as without one
  EXPECT_EQ(pm::gradient_buckets(100, 0, 5).size(), 1u);     // no buckets at all
  const int D = 4;
  const double grads = 4e9, cap = 1e9, first = 1e8;
  auto in = one_stage("gpipe", 1, 2, D, grads, cap);
  for (auto& s : in.stages) s.reduce_first_bucket_bytes = first;
  const auto t = pipetwin::sim::simulate(in).timeline;
  const auto& bw = find(t, 0, ps::Op::B, 0);
  const auto& r = find(t, 0, ps::Op::REDUCE_GRAD, 0);
  double end = bw.start;
  for (const auto& x : pm::gradient_buckets(grads, cap, first)) {
    end = std::max(end, bw.start + x.ready * (bw.end - bw.start)) + ring_allreduce_s(D, x.bytes);
  }
  EXPECT_NEAR(r.end, end, 1e-9 * end);
}

// ZeRO-2 (and ZeRO-3 freeing its weights after each use): every backward
// reduce-scatters its micro-batch's gradients in buckets as it produces
// them, each micro-batch's after the one before it; REDUCE_GRAD ends with
// the last. In SimGrid against that closed form: a ring reduce-scatter,
// (D - 1)(latency + ⌈bytes / D⌉ / bandwidth), per bucket.
TEST(GradientBuckets, ZeroTwoReduceScattersEveryMicrobatch) {
  for (const int D : {2, 4}) {
    for (const double grads : {2e8, 4e9}) {
      const double cap = grads / 4;
      auto in = one_stage("gpipe", 1, 3, D, grads, cap);
      in.program.zero = 2;
      for (auto& s : in.stages) s.reduce_each_microbatch = true;
      const auto t = pipetwin::sim::simulate(in).timeline;
      double end = 0;
      int backwards = 0;
      for (const auto& a : t.ranks.at(0)) {
        if (a.action.op != ps::Op::B) continue;
        ++backwards;
        end = std::max(end, a.start);
        for (const auto& b : pm::gradient_buckets(grads, cap)) {
          end = std::max(end, a.start + b.ready * (a.end - a.start)) +
                (D - 1) * (std::ceil(b.bytes / D) / kBandwidth + kLatency);
        }
      }
      ASSERT_EQ(backwards, 3);
      const auto& r = find(t, 0, ps::Op::REDUCE_GRAD, 0);
      EXPECT_NEAR(r.end, end, 1e-9 * end) << "D=" << D << " grads=" << grads;
      EXPECT_GE(find(t, 0, ps::Op::STEP, 0).start, r.end - 1e-12);
    }
  }
}

// HSDP (Program::shard_group G < D): a stage's reduction is a ring
// reduce-scatter inside its group of G replicas, then a ring all-reduce of
// its 1/G over the D / G groups: (G - 1)(latency + ⌈bytes / G⌉ / bandwidth)
// + 2(D/G - 1)(latency + ⌈bytes / D⌉ / bandwidth) after the last backward.
TEST(GradientBuckets, HsdpReducesInsideItsGroupThenAcross) {
  const double grads = 4e9;
  for (const auto& [D, G] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{8, 4}}) {
    auto in = one_stage("gpipe", 1, 2, D, grads, 0);
    in.program.zero = 1, in.program.shard_group = G;
    const auto t = pipetwin::sim::simulate(in).timeline;
    const auto& b = find(t, 0, ps::Op::B, 0);
    const auto& r = find(t, 0, ps::Op::REDUCE_GRAD, 0);
    const int R = D / G;
    const double expected = b.end + (G - 1) * (kLatency + std::ceil(grads / G) / kBandwidth) +
                            2 * (R - 1) * (kLatency + std::ceil(grads / G / R) / kBandwidth);
    EXPECT_NEAR(r.end, expected, 1e-9 * expected) << "D=" << D << " G=" << G;
  }
}
