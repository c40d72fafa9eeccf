// Tensor and data parallelism against closed forms: a ring all-reduce alone on
// its links, data-parallel reductions hidden under the pipeline's cool-down
// (and the first stage's, which ends the step, exposed), ZeRO-1's
// reduce-scatter and all-gather, REDUCE_GRAD's place in the Program, the T and
// D fields through the schedule formats, and a stage's compute, collectives
// and memory split over a tensor-parallel group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "models/families.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"
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

ps::Program parallel(const std::string& schedule, int K, int M, int D, bool zero1 = false) {
  auto p = ps::build_schedule(schedule, {K, M, 1, ps::RecomputePolicy::None});
  p.data_parallel = D;
  p.zero = zero1 ? 1 : 0;
  return ps::insert_gradient_reductions(std::move(p));
}

// 2(D-1)/D · bytes / bandwidth + 2(D-1) · latency, with each round's chunk a whole number of bytes.
double ring_allreduce_s(int D, double bytes, double latency, double bandwidth) {
  return 2.0 * (D - 1) * (std::ceil(bytes / D) / bandwidth + latency);
}

double end_of(const ps::Timeline& t, int rank, ps::Op op, int stage) {
  for (const auto& a : t.ranks.at(rank)) {
    if (a.action.op == op && a.action.stage.value == stage) return a.end;
  }
  ADD_FAILURE() << "no " << ps::op_name(op) << " of stage " << stage << " on rank " << rank;
  return 0;
}

double last_backward_end(const ps::Timeline& t, int rank, int stage) {
  double end = 0;
  for (const auto& a : t.ranks.at(rank)) {
    if ((a.action.op == ps::Op::B || a.action.op == ps::Op::W) && a.action.stage.value == stage) end = std::max(end, a.end);
  }
  return end;
}

}  // namespace

// One stage, D replicas, nothing but the reduction: the step is the ring's
// 2(D-1) rounds of bytes / D, each latency + chunk / bandwidth on its own link.
TEST(DataParallel, RingAllReduceAloneIsTheClosedForm) {
  const double lat = 3e-6, bw = 25e9;
  for (const int D : {2, 3, 4, 8}) {
    for (const double bytes : {1e3, 1e8, 3.3e9}) {
      SimInput in;
      in.program = parallel("gpipe", 1, 1, D);
      ps::StageCosts c;
      c.reduce_bytes = bytes;
      in.stages = {c};
      in.topology = links(lat, bw);
      const auto t = pipetwin::sim::simulate(in).timeline;
      const double want = ring_allreduce_s(D, bytes, lat, bw);
      EXPECT_NEAR(t.makespan(), want, 1e-9 * want) << "D=" << D << " bytes=" << bytes;
      EXPECT_NEAR(end_of(t, 0, ps::Op::REDUCE_GRAD, 0), want, 1e-9 * want);
    }
  }
}

// A tensor-parallel group of T devices reduces T shares at once, each device
// over its own link: on the group's merged route (T links' bandwidth), the
// ring of one device's share alone.
TEST(DataParallel, AGroupsDevicesReduceTheirSharesSideBySide) {
  const double lat = 2e-6, bw = 25e9, share = 3e8;
  for (const int T : {2, 4}) {
    SimInput in;
    in.program = parallel("gpipe", 1, 1, 2);
    in.program.tensor_parallel = T;
    ps::StageCosts c;
    c.reduce_bytes = share;
    in.stages = {c};
    in.topology = links(lat, bw);
    const double want = 2.0 * (std::ceil(T * share / 2) / (T * bw) + lat);
    EXPECT_NEAR(pipetwin::sim::simulate(in).timeline.makespan(), want, 1e-9 * want) << "T=" << T;
  }
}

// A shared host whose ranks keep their core until they wait: a rank waiting
// for its reduction or inside a ring gives its core up, so one core serves
// every replica.
TEST(DataParallel, OneSharedCoreServesEveryReplica) {
  SimInput in;
  in.program = parallel("1f1b", 2, 4, 2, /*zero1=*/true);
  ps::StageCosts c;
  c.forward_s = 1e-3, c.backward_s = 2e-3, c.step_s = 1e-3;
  c.activation_bytes = c.gradient_bytes = 1e5;
  c.reduce_bytes = 1e6, c.gather_bytes = 1e6;
  in.stages.assign(2, c);
  in.stages[0].gradient_bytes = 0;
  in.stages[1].activation_bytes = 0;
  in.topology.kind = pm::TopologyKind::SharedHost;
  in.topology.host_cores = 1;
  in.topology.run_to_completion = true;
  in.topology.intra = {1e-6, 1e9};
  const auto t = pipetwin::sim::simulate(in).timeline;
  // Four ranks' compute on one core: at least the sum of their work.
  EXPECT_GE(t.makespan(), 2 * 2 * (4 * 3e-3 + 1e-3) - 1e-12);
}

// ZeRO-1: a reduce-scatter (D-1 rounds) before the step and an all-gather
// (D-1 rounds) after it, of the gradients' and the weights' bytes.
TEST(DataParallel, ZeroOneIsAReduceScatterThenAnAllGather) {
  const double lat = 2e-6, bw = 50e9, grads = 4e8, weights = 2e8, step = 0.01;
  for (const int D : {2, 4, 6}) {
    SimInput in;
    in.program = parallel("gpipe", 1, 1, D, /*zero1=*/true);
    ps::StageCosts c;
    c.reduce_bytes = grads, c.gather_bytes = weights, c.step_s = step;
    in.stages = {c};
    in.topology = links(lat, bw);
    const auto t = pipetwin::sim::simulate(in).timeline;
    const double scatter = (D - 1) * (std::ceil(grads / D) / bw + lat);
    const double gather = (D - 1) * (std::ceil(weights / D) / bw + lat);
    const double want = scatter + step + gather;
    EXPECT_NEAR(t.makespan(), want, 1e-9 * want) << "D=" << D;
    EXPECT_NEAR(end_of(t, 0, ps::Op::REDUCE_GRAD, 0), scatter, 1e-9 * scatter);
  }
}

// 1F1B over K ranks, D = 2: a stage's reduction starts after its last
// backward and runs while the stages before it finish theirs. The last
// stages' reductions hide under that cool-down; the first stage's ends the
// step. Each STEP waits for its own reduction: the step is
// max over stages of (its last backward's end + the ring).
TEST(DataParallel, ReductionsHideUnderTheCoolDownWhenTheyFit) {
  const int K = 4, M = 8, D = 2;
  ps::StageCosts c;
  c.forward_s = 1, c.backward_s = 2;
  const auto topo = links(0, 1e9);

  SimInput alone;
  alone.program = ps::build_schedule("1f1b", {K, M, 1, ps::RecomputePolicy::None});
  alone.stages.assign(K, c);
  alone.topology = topo;
  const auto base = pipetwin::sim::simulate(alone).timeline;
  // The cool-down: stage K-1's last backward ends this long before stage 0's.
  const double slack = last_backward_end(base, 0, 0) - last_backward_end(base, K - 1, K - 1);
  ASSERT_GT(slack, 0);

  for (const double ring_s : {0.25 * slack, 0.9 * slack, 2.0 * slack}) {
    SimInput in;
    in.program = parallel("1f1b", K, M, D);
    in.stages.assign(K, c);
    for (auto& s : in.stages) s.reduce_bytes = ring_s * 1e9 * D / (2.0 * (D - 1));  // one ring takes ring_s
    in.topology = topo;
    const auto t = pipetwin::sim::simulate(in).timeline;
    double want = 0;
    for (int k = 0; k < K; ++k) want = std::max(want, last_backward_end(base, k, k) + ring_s);
    EXPECT_NEAR(t.makespan(), want, 1e-9 * want) << "ring " << ring_s;
    // Only stage 0's reduction is exposed while every other one fits in the cool-down.
    if (ring_s < slack) {
      EXPECT_NEAR(t.makespan(), base.makespan() + ring_s, 1e-9 * want);
      EXPECT_LE(end_of(t, K - 1, ps::Op::REDUCE_GRAD, K - 1), last_backward_end(base, 0, 0) + 1e-9);
    } else {
      EXPECT_GT(end_of(t, K - 1, ps::Op::REDUCE_GRAD, K - 1), last_backward_end(base, 0, 0));
    }
  }
}

// Replicas whose rings and pipelines cross the same links slow each other
// down: a shared-link topology (one network link per host) makes the step
// longer than the same program on private links.
TEST(DataParallel, ReductionsShareTheNetworkWithTheTransfers) {
  const int K = 2, M = 4, D = 2;
  ps::StageCosts c;
  c.forward_s = 1e-3, c.backward_s = 2e-3;
  c.activation_bytes = c.gradient_bytes = 2e7;
  c.reduce_bytes = 1e9;
  SimInput in;
  in.program = parallel("1f1b", K, M, D);
  in.stages.assign(K, c);
  in.stages[0].gradient_bytes = 0;
  in.stages[K - 1].activation_bytes = 0;
  in.topology = links(1e-6, 1e10);
  const double private_links = pipetwin::sim::simulate(in).timeline.makespan();
  // Every group on its own host, all hosts behind one network link each.
  in.topology.kind = pm::TopologyKind::MultiHost;
  in.topology.devices_per_host = 1;
  in.topology.inter = {1e-6, 1e10};
  const double shared = pipetwin::sim::simulate(in).timeline.makespan();
  EXPECT_GT(shared, private_links * 1.01);
}

TEST(DataParallel, ReduceGradStandsAfterEachStagesLastBackward) {
  for (const char* g : {"gpipe", "1f1b", "zb-h1", "interleaved-1f1b"}) {
    const int V = std::string(g) == "interleaved-1f1b" ? 2 : 1;
    auto p = ps::build_schedule(g, {4, 8, V, ps::RecomputePolicy::None});
    p.data_parallel = 3;
    p = ps::insert_gradient_reductions(std::move(p));
    ps::validate(p);
    for (const auto& actions : p.ranks) {
      for (std::size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].op != ps::Op::REDUCE_GRAD) continue;
        const int s = actions[i].stage.value;
        ASSERT_GT(i, 0u);
        EXPECT_TRUE(actions[i - 1].op == ps::Op::B || actions[i - 1].op == ps::Op::W) << g;
        EXPECT_EQ(actions[i - 1].stage.value, s) << g;
        for (std::size_t j = i + 1; j < actions.size(); ++j) {
          EXPECT_FALSE((actions[j].op == ps::Op::B || actions[j].op == ps::Op::W) && actions[j].stage.value == s) << g;
        }
      }
    }
    int reductions = 0;
    for (const auto& actions : p.ranks) {
      reductions += static_cast<int>(std::count_if(actions.begin(), actions.end(),
                                                   [](const ps::Action& a) { return a.op == ps::Op::REDUCE_GRAD; }));
    }
    EXPECT_EQ(reductions, p.num_stages()) << g;
    // Once only, and not at all for one replica; a stage whose reduction is
    // already there (a PyTorch CSV's) keeps it, the others get theirs.
    auto partial = ps::build_schedule(g, {4, 8, V, ps::RecomputePolicy::None});
    partial.data_parallel = 3;
    for (auto& actions : partial.ranks) {
      for (std::size_t i = 0; i < actions.size(); ++i) {
        if (actions[i].op == ps::Op::STEP && actions[i].stage.value == 0) {
          actions.insert(actions.begin() + static_cast<std::ptrdiff_t>(i), ps::make_stage_action(ps::Op::REDUCE_GRAD, 0));
          break;
        }
      }
    }
    partial = ps::insert_gradient_reductions(std::move(partial));
    int of_stage0 = 0, all = 0;
    for (const auto& actions : partial.ranks) {
      for (const auto& a : actions) {
        if (a.op != ps::Op::REDUCE_GRAD) continue;
        ++all;
        of_stage0 += a.stage.value == 0;
      }
    }
    EXPECT_EQ(of_stage0, 1) << g;
    EXPECT_EQ(all, partial.num_stages()) << g;
    EXPECT_EQ(ps::insert_gradient_reductions(p), p);
    auto alone = ps::build_schedule(g, {4, 8, V, ps::RecomputePolicy::None});
    EXPECT_EQ(ps::insert_gradient_reductions(alone), alone);
  }
}

TEST(DataParallel, TheFormatsCarryTAndD) {
  auto p = parallel("1f1b", 2, 4, 3, true);
  p.tensor_parallel = 8;
  p.sequence_parallel = true;
  EXPECT_EQ(ps::parse_text(ps::to_text(p), "t.txt"), p);
  EXPECT_EQ(ps::parse_json(ps::to_json(p), "t.json"), p);
  // ZeRO's stages: 1 keeps its older spelling; 2 and 3, and ZeRO-3's weights kept.
  EXPECT_NE(ps::to_text(p).find("shard_optimizer on\n"), std::string::npos);
  for (const int zero : {0, 2, 3}) {
    for (const bool reshard : {true, false}) {
      if (!reshard && zero != 3) continue;
      auto z = p;
      z.zero = zero, z.reshard_after_forward = reshard;
      EXPECT_EQ(ps::parse_text(ps::to_text(z), "t.txt"), z) << zero << reshard;
      EXPECT_EQ(ps::parse_json(ps::to_json(z), "t.json"), z) << zero << reshard;
    }
  }
  EXPECT_THROW(ps::parse_text("data_parallel 2\nzero 4\nrank 0: 0F0\n", "bad.txt"), pipetwin::Error);
  auto hsdp = p;
  hsdp.zero = 3, hsdp.shard_group = 1;  // D = 3 in groups of one: valid, and carried
  EXPECT_EQ(ps::parse_text(ps::to_text(hsdp), "t.txt"), hsdp);
  EXPECT_EQ(ps::parse_json(ps::to_json(hsdp), "t.json"), hsdp);
  hsdp.shard_group = 2;  // does not divide D = 3
  EXPECT_THROW(ps::validate(hsdp), pipetwin::Error);
  // Context parallelism: D = 3 replicas in one group of 3, carried; 2 does not divide 3.
  auto cp = p;
  cp.context_parallel = 3;
  EXPECT_NE(ps::to_text(cp).find("context_parallel 3\n"), std::string::npos);
  EXPECT_EQ(ps::parse_text(ps::to_text(cp), "t.txt"), cp);
  EXPECT_EQ(ps::parse_json(ps::to_json(cp), "t.json"), cp);
  EXPECT_EQ(cp.data_groups(), 1);
  EXPECT_NO_THROW(ps::validate(cp));
  cp.context_parallel = 2;
  EXPECT_THROW(ps::validate(cp), pipetwin::Error);
  auto two = p;
  two.zero = 2;
  std::string json = ps::to_json(two);
  const auto at = json.find("true", json.find("\"shard_optimizer\""));
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 4, "false");
  try {
    ps::parse_json(json, "bad.json");
    FAIL() << "zero 2 beside shard_optimizer false was read";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json: field 'zero' is 2"), std::string::npos) << e.what();
  }
  // A pipeline alone writes none of them: older files read the same.
  const auto alone = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::None});
  EXPECT_EQ(ps::to_text(alone).find("parallel"), std::string::npos);
  EXPECT_EQ(ps::to_json(alone).find("parallel"), std::string::npos);
  EXPECT_THROW(ps::parse_text("tensor_parallel 0\nrank 0: 0F0\n", "bad.txt"), pipetwin::Error);
  EXPECT_THROW(ps::parse_text("sequence_parallel yes\nrank 0: 0F0\n", "bad.txt"), pipetwin::Error);
  // Sequence parallelism without a tensor-parallel group, ZeRO-1 without a data group: invalid.
  auto lone = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::None});
  lone.sequence_parallel = true;
  EXPECT_THROW(ps::validate(lone), pipetwin::Error);
  lone.sequence_parallel = false, lone.zero = 1;
  EXPECT_THROW(ps::validate(lone), pipetwin::Error);
  lone.zero = 0, lone.tensor_parallel = 1 << 16, lone.data_parallel = 1 << 16;
  EXPECT_THROW(ps::validate(lone), pipetwin::Error);  // 2^33 devices
  try {
    ps::parse_text("data_parallel -2\nrank 0: 0F0\n", "bad.txt");
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data_parallel"), std::string::npos) << e.what();
  }
}

namespace {

// A device whose every operation runs at its peak: time = FLOPs / peak.
pm::Hardware ideal(double lat, double bw) {
  pm::Hardware h;
  h.name = "ideal";
  h.device.name = "ideal";
  h.device.peak_flops_fp32 = h.device.peak_flops_half = 1e14;
  h.device.memory_bytes = 1e12;
  h.device.memory_bandwidth = 1e12;
  h.topology = links(lat, bw);
  return h;
}

pm::PartitionRequest request(int T, int D, bool sp, bool zero1, int b) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::None});
  r.program.tensor_parallel = T, r.program.data_parallel = D;
  r.program.sequence_parallel = sp, r.program.zero = zero1 ? 1 : 0;
  r.microbatch_size = b;
  r.collective = pm::Collective::Ring;  // the tree and auto: test_collectives.cpp
  return r;
}

}  // namespace

// A stage split over T devices: each computes 1/T of every layer and runs the
// layer's collectives, ring all-reduces of s·h·b values over the group's link.
TEST(TensorParallel, AStageComputesATthAndRunsItsCollectives) {
  const pm::TransformerSpec spec{6, 512, 2048, 8, 256, 1000};
  const auto model = pm::transformer_model(spec, pm::Precision::BF16, "t6");
  const double lat = 2e-6, bw = 300e9;
  const auto hw = ideal(lat, bw);
  const int n = static_cast<int>(model.layers.size()), b = 4;
  const pm::StageCostModel one(model, hw, request(1, 1, false, false, b));
  for (const int T : {2, 4, 8}) {
    const pm::StageCostModel split(model, hw, request(T, 1, false, false, b));
    const double bytes = 256.0 * 512 * b * 2;
    const double ar = 2.0 * (T - 1) / T * bytes / bw + 2.0 * (T - 1) * lat;
    EXPECT_NEAR(split.tp_allreduce_s(bytes), ar, 1e-12 * ar);
    // Embedding: 1 forward all-reduce; 6 blocks: 2 forward and 2 backward each; head: 1 backward.
    const double fwd = one.forward_s(0, n, 0) / T + (1 + 2 * 6) * ar;
    const double bwd = one.input_grad_s(0, n, 0) / T + (2 * 6 + 1) * ar;
    EXPECT_NEAR(split.forward_s(0, n, 0), fwd, 1e-9 * fwd) << "T=" << T;
    EXPECT_NEAR(split.input_grad_s(0, n, 0), bwd, 1e-9 * bwd) << "T=" << T;
    EXPECT_NEAR(split.weight_grad_s(0, n, 0), one.weight_grad_s(0, n, 0) / T, 1e-9 * one.weight_grad_s(0, n, 0));
    EXPECT_NEAR(split.tp_collective_s(0, n, 0), 26 * ar, 1e-9 * 26 * ar);
    EXPECT_NEAR(split.tp_forward_s(0, n), 13 * ar, 1e-9 * 13 * ar);
    EXPECT_NEAR(split.tp_backward_s(0, n), 13 * ar, 1e-9 * 13 * ar);
  }
}

// A layer's elementwise traffic runs at the memory bandwidth times the
// device's memory_efficiency, on top of its FLOPs and collectives: the norms'
// and dropouts' part whole on every member of a tensor group unless sequence
// parallelism splits it, the rest split over T. A calibrated curve for the
// kind includes it (the measured times did), so nothing is added then.
TEST(TensorParallel, ElementwiseTrafficRunsAtTheMemoryBandwidth) {
  pm::LlmSpec t;
  t.layers = 4, t.hidden = 512, t.ffn_hidden = 2048, t.heads = 8, t.seq_len = 256, t.vocab = 1000;
  t.mlp = pm::LlmSpec::Mlp::Gelu, t.norm = pm::LlmSpec::Norm::LayerNorm, t.dropout = true, t.flash_attention = false;
  const auto model = pm::llm_model(t, pm::Precision::BF16, "gpt");
  const int n = static_cast<int>(model.layers.size()), b = 2;
  auto hw = ideal(1e-6, 1e11);
  hw.device.memory_efficiency = 0.5;
  auto no_bandwidth = hw;
  no_bandwidth.device.memory_bandwidth = 0;
  for (const int T : {1, 2, 4}) {
    for (const bool sp : {false, true}) {
      if (sp && T == 1) continue;
      const pm::StageCostModel with(model, hw, request(T, 1, sp, false, b)),
          without(model, no_bandwidth, request(T, 1, sp, false, b));
      double fwd = 0, bwd = 0;
      for (const auto& l : model.layers) {
        const auto& c = l.cost;
        const double whole = sp ? 1.0 / T : 1.0;
        fwd += b * (c.forward_traffic_replicated * whole + (c.forward_traffic - c.forward_traffic_replicated) / T);
        bwd += b * (c.backward_traffic_replicated * whole + (c.backward_traffic - c.backward_traffic_replicated) / T);
      }
      EXPECT_GT(fwd, 0);
      const double rate = 1e12 * 0.5;
      EXPECT_NEAR(with.forward_s(0, n, 0) - without.forward_s(0, n, 0), fwd / rate, 1e-9 * fwd / rate) << T << sp;
      EXPECT_NEAR(with.input_grad_s(0, n, 0) - without.input_grad_s(0, n, 0), bwd / rate, 1e-9 * bwd / rate) << T << sp;
      EXPECT_DOUBLE_EQ(with.weight_grad_s(0, n, 0), without.weight_grad_s(0, n, 0));
    }
  }
  // A calibrated curve for the blocks: their traffic is in it.
  auto calibrated = hw;
  calibrated.device.kinds["decoder_block"] = pm::KindEfficiency{};
  auto calibrated_nb = calibrated;
  calibrated_nb.device.memory_bandwidth = 0;
  const pm::StageCostModel c1(model, calibrated, request(1, 1, false, false, b)),
      c0(model, calibrated_nb, request(1, 1, false, false, b));
  EXPECT_DOUBLE_EQ(c1.forward_s(1, n - 1, 0), c0.forward_s(1, n - 1, 0));
}

// On a shared host a tensor group's collectives are waits, not compute: its
// members' cores are free meanwhile. Two replicas of a T = 2 group on two
// cores, each forward half compute and half collective: replica A computes
// [0, 0.5] and waits [0.5, 1] while B computes; B waits [1, 1.5]. Were the
// waits held on the cores, the forwards would run one after the other (2).
// With a core for every process, the wait changes nothing (1).
TEST(TensorParallel, OnASharedHostTheCollectivesFreeTheCores) {
  for (const int cores : {2, 4}) {
    SimInput in;
    in.program = parallel("gpipe", 1, 1, 2);
    in.program.tensor_parallel = 2;
    ps::StageCosts c;
    c.forward_s = 1, c.tp_forward_s = 0.5;
    in.stages = {c};
    in.topology.kind = pm::TopologyKind::SharedHost;
    in.topology.host_cores = cores;
    in.topology.run_to_completion = true;
    in.topology.intra = {0, 1e12};
    const double want = cores == 2 ? 1.5 : 1.0;
    EXPECT_NEAR(pipetwin::sim::simulate(in).timeline.makespan(), want, 1e-9) << cores << " cores";
  }
}

// Memory per device: weights, gradients and optimizer state over T (and the
// fp32 master and Adam states over D with ZeRO-1); activations over T with
// sequence parallelism, and without it all but the norms' inputs.
TEST(TensorParallel, MemoryPerDeviceSplitsAsMegatronDoes) {
  const pm::TransformerSpec spec{4, 256, 1024, 4, 128, 500};
  const auto model = pm::transformer_model(spec, pm::Precision::BF16, "t4");
  const auto hw = ideal(1e-6, 1e11);
  const int n = static_cast<int>(model.layers.size()), b = 2;
  const pm::StageCostModel one(model, hw, request(1, 1, false, false, b));
  double params = 0, stashed = 0, whole = 0;
  for (const auto& l : model.layers) {
    params += static_cast<double>(l.cost.params);
    stashed += static_cast<double>(l.cost.stashed_elems);
    whole += static_cast<double>(l.cost.tp_replicated_elems);
  }
  for (const int T : {1, 2, 4}) {
    for (const int D : {1, 4}) {
      for (const bool sp : {false, true}) {
        for (const bool zero1 : {false, true}) {
          if ((sp && T == 1) || (zero1 && D == 1)) continue;
          const pm::StageCostModel c(model, hw, request(T, D, sp, zero1, b));
          // bf16 weights and gradients, fp32 master and two Adam states; one weight version.
          const double want_static = params / T * (2 + 2 + (4 + 8) / (zero1 ? D : 1.0));
          EXPECT_NEAR(c.static_bytes(0, n, 0), want_static, 1e-9 * want_static);
          const double act = 2.0 * b * (sp ? stashed / T : whole + (stashed - whole) / T);
          EXPECT_NEAR(c.activation_bytes(0, n), act, 1e-9 * act) << "T=" << T << " sp=" << sp;
          EXPECT_NEAR(c.reduce_bytes(0, n), D > 1 ? params / T * 2 : 0, 1e-9 * params);
          EXPECT_NEAR(c.gather_bytes(0, n), D > 1 && zero1 ? params / T * 2 : 0, 1e-9 * params);
        }
      }
    }
  }
  EXPECT_NEAR(one.activation_bytes(0, n), 2.0 * b * stashed, 1e-9 * stashed);
  // Gradients in fp32 beside bf16 weights (Megatron-LM's main_grad): 18 bytes a
  // parameter with Adam, 6 + 12/D with ZeRO-1 (its theoretical_memory_usage.py),
  // and the data-parallel reductions carry 4 bytes a parameter.
  auto fp32_grads = model;
  fp32_grads.grad_precision = pm::Precision::FP32;
  for (const int D : {1, 4}) {
    for (const bool zero1 : {false, true}) {
      if (zero1 && D == 1) continue;
      const pm::StageCostModel c(fp32_grads, hw, request(2, D, false, zero1, b));
      const double per_param = c.static_bytes(0, n, 0) / (params / 2);
      EXPECT_NEAR(per_param, zero1 ? 6 + 12.0 / D : 18, 1e-9) << "D=" << D;
      EXPECT_NEAR(c.reduce_bytes(0, n), D > 1 ? params / 2 * 4 : 0, 1e-9 * params);
      EXPECT_NEAR(c.gather_bytes(0, n), D > 1 && zero1 ? params / 2 * 2 : 0, 1e-9 * params);
    }
  }
  // The optimizer step reads 4-byte gradients, not 2: 2 bytes a parameter more over the bandwidth.
  const pm::StageCostModel bf16(model, hw, request(2, 1, false, false, b)), fp32(fp32_grads, hw, request(2, 1, false, false, b));
  const double more = params / 2 * 2 / hw.device.memory_bandwidth;
  EXPECT_NEAR(fp32.step_s(0, n, 0) - bf16.step_s(0, n, 0), more, 1e-9 * more);
  // The device's blocking_sends reaches every stage's costs.
  auto blocking = hw;
  blocking.device.blocking_sends = true;
  auto r = request(1, 1, false, false, b);
  r.program.partition = {{0, 3}, {3, n}};
  for (const auto& t : pm::stage_table(pm::StageCostModel(model, blocking, r), blocking, r.program)) EXPECT_TRUE(t.blocking_sends);
  for (const auto& t : pm::stage_table(pm::StageCostModel(model, hw, r), hw, r.program)) EXPECT_FALSE(t.blocking_sends);
}

TEST(TensorParallel, ALayerMegatronDoesNotSplitIsRefusedByName) {
  const auto mlp = pm::mlp_model({64, 10, {128, 128}}, pm::Precision::FP32, "mlp");
  try {
    pm::StageCostModel c(mlp, ideal(1e-6, 1e11), request(2, 1, false, false, 1));
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot be split over 2"), std::string::npos) << e.what();
  }
}
