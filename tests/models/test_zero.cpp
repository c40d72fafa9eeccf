// ZeRO's stages over the data group (Rajbhandari et al. 2020): the memory
// per device against the paper's formulas, written out here (mixed-precision
// Adam: 2Ψ of half-precision weights, 2Ψ of gradients, KΨ = 12Ψ of fp32
// master copy and moments), and ZeRO-3's all-gathers as FSDP2 prefetches
// them, one unit ahead, against the closed form of such a pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "models/collectives.hpp"
#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "models/summary.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

pm::Model gpt() {
  pm::LlmSpec t;
  t.layers = 8, t.hidden = 1024, t.ffn_hidden = 4096, t.heads = 16, t.seq_len = 1024, t.vocab = 51200;
  auto m = pm::llm_model(t, pm::Precision::BF16, "gpt");
  m.grad_precision = pm::Precision::BF16;  // the paper's 2Ψ of gradients
  return m;
}

pm::PartitionRequest request(int D, int zero, bool reshard = true, int K = 1, int M = 4) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {K, M, 1, ps::RecomputePolicy::None});
  r.program.data_parallel = D, r.program.zero = zero, r.program.reshard_after_forward = reshard;
  return r;
}

// The largest layer's parameters: an FSDP unit's.
double largest_layer(const pm::StageCostModel& c, int n) {
  double most = 0;
  for (int l = 0; l < n; ++l) most = std::max(most, static_cast<double>(c.params(l, l + 1)));
  return most;
}

}  // namespace

TEST(Zero, MemoryPerDeviceIsThePapersFormula) {
  const auto model = gpt();
  const auto hw = pm::preset("dgx-a100-80gb");
  const int n = static_cast<int>(model.layers.size());
  for (const int D : {2, 8, 64}) {
    const double dd = D;
    for (int zero = 0; zero <= 3; ++zero) {
      const pm::StageCostModel c(model, hw, request(D, zero));
      const double psi = static_cast<double>(c.params(0, n));
      // Rajbhandari et al. 2020, section 5: baseline (2 + 2 + K)Ψ, P_os 4Ψ + KΨ/N_d,
      // P_os+g 2Ψ + (2 + K)Ψ/N_d, P_os+g+p (2 + 2 + K)Ψ/N_d, K = 12.
      const double expected[] = {16 * psi, 4 * psi + 12 * psi / dd, 2 * psi + 14 * psi / dd, 16 * psi / dd};
      const auto parts = c.memory_parts(0, n, 0);
      const double states = parts.weights + parts.gradients + parts.optimizer;
      EXPECT_NEAR(states, expected[zero], 1e-12 * expected[zero]) << "D=" << D << " zero=" << zero;
      EXPECT_NEAR(c.static_bytes(0, n, 0), states, 1e-9 * states);
      // What is held whole for a moment: a layer's gradients until
      // reduce-scattered (2, 3); the unit computing and the one prefetched (3).
      const pm::StageCostModel none(model, hw, request(D, 0));
      const double unit = largest_layer(c, n);
      const double extra[] = {0, 0, 2 * unit, 2 * unit + 2 * 2 * unit};
      EXPECT_NEAR(parts.workspace - none.memory_parts(0, n, 0).workspace, extra[zero], 1e-6) << "zero=" << zero;
    }
    // FSDP2 under a pipeline with reshard_after_forward off (torchtitan's
    // choice) keeps a stage's weights and its gradients whole through the
    // step: only the optimizer state and master copy stay sharded, ZeRO-1's peak.
    const pm::StageCostModel kept(model, hw, request(D, 3, false)), one(model, hw, request(D, 1));
    const auto a = kept.memory_parts(0, n, 0), b = one.memory_parts(0, n, 0);
    EXPECT_DOUBLE_EQ(a.weights, b.weights);
    EXPECT_DOUBLE_EQ(a.gradients, b.gradients);
    EXPECT_DOUBLE_EQ(a.optimizer, b.optimizer);
  }
}

// Gather u + 1 is issued when unit u starts computing; one gather at a time.
TEST(Zero, PrefetchedPassIsItsClosedForm) {
  // Compute covers every gather: only the first is exposed.
  EXPECT_DOUBLE_EQ(pm::prefetched_pass_s({{1, 2}, {1, 2}, {1, 2}}), 1 + 6);
  // Gathers longer than compute: they run back to back, the last unit's compute after.
  EXPECT_DOUBLE_EQ(pm::prefetched_pass_s({{3, 1}, {3, 1}, {3, 1}}), 9 + 1);
  EXPECT_DOUBLE_EQ(pm::prefetched_pass_s({}), 0);
  // g_1 + sum_{u<n} max(c_u, g_{u+1}) + c_n on random units.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> x(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<pm::GatheredUnit> units(1 + trial % 9);
    for (auto& u : units) u = {x(rng), x(rng)};
    double closed = units.front().gather_s + units.back().compute_s;
    for (std::size_t u = 0; u + 1 < units.size(); ++u) closed += std::max(units[u].compute_s, units[u + 1].gather_s);
    EXPECT_NEAR(pm::prefetched_pass_s(units), closed, 1e-12) << "trial " << trial;
  }
}

// ZeRO-3 on a real stage: each layer's gather is a ring all-gather of its
// weights over the data group, and what a pass adds lies between the first
// layer's gather (compute hides the rest) and all of them.
TEST(Zero, Zero3GathersEachLayerAsARing) {
  const auto model = gpt();
  const auto hw = pm::preset("dgx-a100-80gb");
  const int n = static_cast<int>(model.layers.size()), D = 8;
  const pm::StageCostModel c(model, hw, request(D, 3));
  const pm::Link link = pm::data_group_link(hw.topology, 1, D, 0);
  double all = 0;
  for (int l = 0; l < n; ++l) {
    const double bytes = static_cast<double>(c.params(l, l + 1)) * 2;
    const double ring = bytes > 0 ? (D - 1) * (link.latency_s + std::ceil(bytes / D) / link.bandwidth) : 0;
    EXPECT_NEAR(c.layer_gather_s(l, 0), ring, 1e-12 + 1e-12 * ring) << "layer " << l;
    all += ring;
  }
  for (const auto op : {ps::Op::F, ps::Op::B, ps::Op::I}) {
    const double exposed = c.gather_exposed_s(0, n, 0, op);
    const bool backward = op != ps::Op::F;
    const double first = c.layer_gather_s(backward ? n - 1 : 0, 0);
    EXPECT_GE(exposed, first - 1e-15) << ps::op_name(op);
    EXPECT_LE(exposed, all + 1e-15) << ps::op_name(op);
  }
  EXPECT_EQ(c.gather_exposed_s(0, n, 0, ps::Op::W), 0);  // a weight gradient needs no weights
  for (int zero = 0; zero < 3; ++zero) {
    EXPECT_EQ(pm::StageCostModel(model, hw, request(D, zero)).gather_exposed_s(0, n, 0, ps::Op::F), 0) << zero;
  }
  // ZeRO-1 and 2 all-gather the updated weights after the step; ZeRO-3 does not.
  EXPECT_GT(pm::StageCostModel(model, hw, request(D, 2)).gather_bytes(0, n), 0);
  EXPECT_EQ(c.gather_bytes(0, n), 0);
  // Every micro-batch's gradients reduce-scattered, a layer's at a time (ZeRO-2 and 3).
  EXPECT_TRUE(c.reduces_each_microbatch());
  EXPECT_DOUBLE_EQ(c.gradient_bucket_bytes(0, n), largest_layer(c, n) * 2);
  EXPECT_FALSE(pm::StageCostModel(model, hw, request(D, 1)).reduces_each_microbatch());
  EXPECT_FALSE(pm::StageCostModel(model, hw, request(D, 3, false)).reduces_each_microbatch());
}

// With a micro-batch so large that compute covers every gather, a forward
// adds exactly its first layer's gather (FSDP2's exposed communication is
// that one gather); with one so small that the gathers dominate, nearly
// all of them.
TEST(Zero, Zero3ExposesOnlyTheFirstGatherWhenComputeCoversTheRest) {
  const auto model = gpt();
  const auto hw = pm::preset("dgx-a100-80gb");
  const int n = static_cast<int>(model.layers.size()), D = 8;
  auto big = request(D, 3);
  big.microbatch_size = 64;
  const pm::StageCostModel c(model, hw, big);
  // The eight blocks (layers 1 to 8): each covers the next one's gather.
  // Not the embedding before them, a lookup too short to cover the first block's.
  EXPECT_NEAR(c.gather_exposed_s(1, 9, 0, ps::Op::F), c.layer_gather_s(1, 0), 1e-12);
  EXPECT_NEAR(c.gather_exposed_s(1, 9, 0, ps::Op::B), c.layer_gather_s(8, 0), 1e-12);  // the last block's first
  EXPECT_GT(c.gather_exposed_s(0, 9, 0, ps::Op::F), c.layer_gather_s(0, 0));
  auto slow = hw;
  slow.topology.inter.bandwidth /= 1000, slow.topology.intra.bandwidth /= 1000;
  const pm::StageCostModel d(model, slow, request(D, 3));
  double all = 0, compute = 0;
  for (int l = 0; l < n; ++l) all += d.layer_gather_s(l, 0);
  compute = d.forward_s(0, n, 0);
  EXPECT_GT(d.gather_exposed_s(0, n, 0, ps::Op::F), all - compute);
}

// HSDP: ZeRO-3 sharded over groups of G replicas, replicated across D / G:
// the states divided by G, not D, and each layer gathered over its group.
TEST(Zero, HsdpShardsOverItsGroup) {
  const auto model = gpt();
  const auto hw = pm::preset("dgx-h100");
  const int n = static_cast<int>(model.layers.size()), D = 16;
  for (const int G : {2, 4, 8}) {
    auto r = request(D, 3);
    r.program.shard_group = G;
    const pm::StageCostModel c(model, hw, r);
    const double psi = static_cast<double>(c.params(0, n));
    const auto parts = c.memory_parts(0, n, 0);
    EXPECT_NEAR(parts.weights + parts.gradients + parts.optimizer, 16 * psi / G, 1e-9 * psi) << "G=" << G;
    const pm::Link link = pm::data_subgroup_link(hw.topology, 1, D, 0, G, 1);
    const double bytes = static_cast<double>(c.params(1, 2)) * 2;
    EXPECT_NEAR(c.layer_gather_s(1, 0), (G - 1) * (link.latency_s + std::ceil(bytes / G) / link.bandwidth), 1e-15) << G;
  }
  // A group inside a node gathers over NVLink; all 16 replicas cross nodes.
  EXPECT_GT(pm::data_subgroup_link(hw.topology, 1, D, 0, 8, 1).bandwidth, pm::data_group_link(hw.topology, 1, D, 0).bandwidth);
}

// ZeRO-3 keeping the weights between uses, with FSDP's UNSHARD and RESHARD
// (schedule::insert_unshards): a rank holds a stage's weights whole only
// from its UNSHARD to its RESHARD. Two stages on one rank: gathered both at
// once (N = 2) the peak holds both whole, as without the actions; one at a
// time (N = 1), the shards and at most the larger stage's gathered weights.
TEST(Zero, UnshardedStagesHoldTheirWeightsWholeOnlyWhileGathered) {
  const auto model = gpt();
  const auto hw = pm::preset("dgx-a100-80gb");
  const int n = static_cast<int>(model.layers.size()), D = 8;
  std::vector<ps::LayerRange> ranges{{0, n / 2}, {n / 2, n}};
  const auto parts_of = [&](int active) {
    auto r = request(D, 3, false);
    r.program = ps::lower(ps::generate("looped-bfs", {1, 4, 2}));
    r.program.data_parallel = D, r.program.zero = 3, r.program.reshard_after_forward = false;
    r.program = ps::insert_gradient_reductions(std::move(r.program));
    if (active > 0) r.program = ps::insert_unshards(std::move(r.program), active);
    r.program.partition = ranges;
    const pm::StageCostModel c(model, hw, r);
    return pm::rank_peak_parts(ps::dry_run(r.program).timeline, r.program, c).at(0);
  };
  const pm::StageCostModel c(model, hw, [&] {
    auto r = request(D, 3, false);
    r.program = ps::lower(ps::generate("looped-bfs", {1, 4, 2}));
    r.program.data_parallel = D, r.program.zero = 3, r.program.reshard_after_forward = false;
    r.program.partition = ranges;
    return r;
  }());
  const double whole = c.memory_parts(0, n / 2, 0).weights + c.memory_parts(n / 2, n, 1).weights;
  const double g0 = c.gathered_weight_bytes(0, n / 2, 0), g1 = c.gathered_weight_bytes(n / 2, n, 1);
  ASSERT_GT(g0, 0);
  ASSERT_GT(g1, 0);
  // Gathered beyond the shard: the weights less 1/D of them (2 bytes each, one version).
  EXPECT_NEAR(g0, c.params(0, n / 2) * 2.0 * (1 - 1.0 / D), 1e-6 * g0);
  const auto kept = parts_of(0), both = parts_of(2), one = parts_of(1);
  EXPECT_NEAR(kept.weights, whole, 1e-9 * whole);
  EXPECT_NEAR(both.weights, whole, 1e-9 * whole);
  const double shards = whole - g0 - g1;
  EXPECT_GE(one.weights, shards + std::min(g0, g1) - 1e-6 * whole);
  EXPECT_LE(one.weights, shards + std::max(g0, g1) + 1e-6 * whole);
  EXPECT_LT(one.total(), both.total());
  // Without ZeRO-3's kept weights an UNSHARD changes nothing: nothing to gather.
  EXPECT_EQ(pm::StageCostModel(model, hw, request(D, 3)).gathered_weight_bytes(0, n, 0), 0);
  EXPECT_EQ(pm::StageCostModel(model, hw, request(D, 3)).unshard_bytes(0, n), 0);
  EXPECT_EQ(pm::StageCostModel(model, hw, request(D, 2)).unshard_bytes(0, n), 0);
}
