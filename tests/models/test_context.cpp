// Context parallelism (Program::context_parallel): each sample's sequence
// split over C devices in load-balanced causal chunks. Against closed forms
// written out here: every layer's work and memory per device divided by C
// (the attention's with load balancing too), the keys and values passed
// around the ring hidden under the attention of the block held where it
// covers them and exposed by (C - 1)(step - block) where not, all-gathered
// in full, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "models/collectives.hpp"
#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "tests/models/flat_hardware.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

pm::Model llama(std::int64_t seq) {
  pm::LlmSpec t;
  t.layers = 4, t.hidden = 1024, t.ffn_hidden = 3584, t.heads = 16, t.kv_heads = 4, t.seq_len = seq, t.vocab = 32000;
  return pm::llm_model(t, pm::Precision::BF16, "llama");
}

using pm::testing::flat;  // H100's rates: a pass's time is its FLOPs over the rate plus its traffic over the bandwidth

// D data groups of C: the Program's data_parallel counts all D x C replicas.
pm::PartitionRequest request(int C, int D = 1, int b = 2, bool all_gather = false) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {1, 4, 1, ps::RecomputePolicy::None});
  r.program.data_parallel = D * C, r.program.context_parallel = C;
  r.microbatch_size = b;
  r.context_all_gather = all_gather;
  return r;
}

}  // namespace

// The attention's FLOPs per device: a causal attention over s tokens split in
// 2C chunks, device i taking chunks i and 2C-1-i, computes the same share of
// the scores (the chunk pairs' query rows against every earlier key) on each
// device: 1/C of the whole. Counted here block by block.
TEST(Context, LoadBalancedChunksGiveEachDeviceAnEqualShare) {
  for (const int C : {2, 4, 8}) {
    const long long s = 64 * C, chunk = s / (2 * C);
    long long total = 0, most = 0, least = s * s;
    for (int i = 0; i < C; ++i) {
      long long mine = 0;
      for (const long long q : {static_cast<long long>(i), 2LL * C - 1 - i}) {
        for (long long row = q * chunk; row < (q + 1) * chunk; ++row) mine += row + 1;  // keys 0..row
      }
      total += mine, most = std::max(most, mine), least = std::min(least, mine);
    }
    EXPECT_EQ(total, s * (s + 1) / 2) << C;
    EXPECT_EQ(most, least) << C;  // each device total / C
  }
}

TEST(Context, EachDeviceDoesAndHoldsOneCthOfEverySample) {
  const auto model = llama(4096);
  const auto hw = flat("dgx-h100");
  const int n = static_cast<int>(model.layers.size());
  const pm::StageCostModel one(model, hw, request(1, 2)), ag(model, hw, request(2, 1, 2, true));
  // All-gathered keys and values: the compute exactly half, the exchange on top.
  const double step = pm::data_subgroup_link(hw.topology, 1, 2, 0, 2, 1).seconds(2.0 * 4096 * 256 * 2 * 2 / 2);
  for (int l = 1; l + 1 < n; ++l) {
    EXPECT_NEAR(ag.forward_s(l, l + 1, 0), one.forward_s(l, l + 1, 0) / 2 + step, 1e-12) << l;
    EXPECT_NEAR(ag.input_grad_s(l, l + 1, 0), one.input_grad_s(l, l + 1, 0) / 2 + step, 1e-12) << l;
    EXPECT_NEAR(ag.weight_grad_s(l, l + 1, 0), one.weight_grad_s(l, l + 1, 0) / 2, 1e-12) << l;
  }
  // The stash, the workspace and the cut: half a sample's tokens each.
  EXPECT_NEAR(ag.activation_bytes(0, n), one.activation_bytes(0, n) / 2, 1e-6);
  EXPECT_NEAR(ag.workspace_bytes(0, n), one.workspace_bytes(0, n) / 2, 1e-6);
  EXPECT_NEAR(ag.cut_bytes(2), one.cut_bytes(2) / 2, 1e-9);
  // The weights stay whole on every device.
  EXPECT_EQ(ag.params(0, n), one.params(0, n));
}

TEST(Context, TheRingHidesUnderTheBlocksAttentionWhereItCovers) {
  const auto hw = flat("dgx-h100");
  const auto& d = hw.device;
  for (const std::int64_t seq : {2048, 65536}) {
    const auto model = llama(seq);
    for (const int C : {2, 4, 8}) {
      const pm::StageCostModel ring(model, hw, request(C)), gathered(model, hw, request(C, 1, 2, true));
      const pm::Link link = pm::data_subgroup_link(hw.topology, 1, C, 0, C, 1);
      const double s = static_cast<double>(seq), b = 2.0 / C;  // a device's samples' worth of tokens
      const double step = link.seconds(2 * s * 256 * b * 2);   // its chunk of K and V (kv width 256, bf16)
      const double block = 4 * s * s * 1024 * b / (d.peak_flops_half * 0.5) / C;  // the attention of one block
      const double fwd = (C - 1) * std::max(0.0, step - block), bwd = (C - 1) * std::max(0.0, 2 * step - 2 * block);
      // The ring's exposed part is the all-gather's time less what it hides.
      EXPECT_NEAR(gathered.forward_s(1, 2, 0) - ring.forward_s(1, 2, 0), (C - 1) * step - fwd, 1e-12) << seq << " " << C;
      EXPECT_NEAR(gathered.input_grad_s(1, 2, 0) - ring.input_grad_s(1, 2, 0), (C - 1) * step - bwd, 1e-12) << seq << " " << C;
      if (seq == 65536) {
        // Long sequences: the attention covers the exchange, none of it exposed.
        const pm::StageCostModel none(model, hw, request(1, C, 2));
        EXPECT_GT(block, step);
        EXPECT_NEAR(ring.forward_s(1, 2, 0), none.forward_s(1, 2, 0) / C, 1e-9 * none.forward_s(1, 2, 0)) << C;
      }
    }
  }
}

TEST(Context, RefusalsNameTheSequenceAndTheModel) {
  const auto hw = pm::preset("dgx-h100");
  try {
    pm::StageCostModel(llama(2044), hw, request(4));
    FAIL() << "2044 tokens do not split into 8 chunks";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence of 2044 tokens does not split into 2 x 4 equal chunks"), std::string::npos)
        << e.what();
  }
  const auto mlp = pm::mlp_model({8, 2, {16}}, pm::Precision::BF16, "mlp");
  EXPECT_THROW(pm::StageCostModel(mlp, hw, request(2)), pipetwin::Error);
}
