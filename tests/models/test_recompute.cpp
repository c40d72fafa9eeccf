// Recompute as Megatron-LM and torchtitan run it: the spellings, selective
// recompute's stash and time, full recompute by layer (uniform and block)
// keeping each checkpoint's input and never re-running the head, and the
// simulated memory of the first rank, part by part, against Megatron-LM's
// theoretical_memory_usage.py (tests/models/megatron_memory.hpp) and, for
// full recompute, which the script has no form for, against Korthikanti et
// al. 2022's Table 2 (2sbh per layer), written out here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/recompute.hpp"
#include "models/stage_costs.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "tests/models/megatron_memory.hpp"
#include "tests/support/errors.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;
namespace pt = pipetwin::testing;

namespace {

using pipetwin::test::error_of;

// Narayanan et al.'s GPT as Megatron-LM ran it in 2021: GELU, LayerNorm,
// learned positions, tied, biases, dropout, no flash attention.
pm::LlmSpec gpt(std::int64_t layers, std::int64_t h, std::int64_t heads, std::int64_t s) {
  pm::LlmSpec t;
  t.layers = layers, t.hidden = h, t.ffn_hidden = 4 * h, t.heads = heads, t.seq_len = s, t.vocab = 51200;
  t.mlp = pm::LlmSpec::Mlp::Gelu;
  t.norm = pm::LlmSpec::Norm::LayerNorm;
  t.positions = pm::LlmSpec::Positions::Learned;
  t.tied_embeddings = t.bias = t.dropout = true;
  t.flash_attention = false;
  return t;
}

pm::Model model_of(const pm::LlmSpec& spec) {
  auto m = pm::llm_model(spec, pm::Precision::BF16, "gpt");
  m.grad_precision = pm::Precision::FP32;  // Megatron-LM's main_grad: 18 bytes a parameter with Adam
  return m;
}

struct Layout {
  int T = 1, K = 1, D = 1, M = 0;
  bool sp = false, zero = false;
  std::string recompute = "none";
};

pm::PartitionRequest request_of(const Layout& c) {
  const auto choice = pm::parse_recompute_choice(c.recompute);
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {c.K, c.M > 0 ? c.M : 2 * c.K, 1, choice.policy});
  r.program.tensor_parallel = c.T, r.program.data_parallel = c.D;
  r.program.sequence_parallel = c.sp, r.program.zero = c.zero ? 1 : 0;
  r.checkpoint = choice.checkpoint;
  return r;
}

// Stage s of K even stages of L blocks: the embedding before the first, the head after the last.
std::pair<int, int> stage_layers(std::int64_t L, int K, int s) {
  const int per = static_cast<int>(L / K);
  return {s == 0 ? 0 : 1 + s * per, s == K - 1 ? static_cast<int>(L) + 2 : 1 + (s + 1) * per};
}

}  // namespace

// ---- Spellings ---------------------------------------------------------------------------------

TEST(RecomputeChoice, SpellingsAndTheirErrors) {
  EXPECT_EQ(pm::parse_recompute_choice("selective").policy, ps::RecomputePolicy::Selective);
  EXPECT_FALSE(pm::parse_recompute_choice("full").checkpoint.by_layer());
  const auto u = pm::parse_recompute_choice("uniform");
  EXPECT_EQ(u.policy, ps::RecomputePolicy::Full);
  EXPECT_EQ(u.checkpoint, (pm::LayerCheckpoint{pm::Checkpoint::Uniform, 1}));
  EXPECT_EQ(pm::parse_recompute_choice("uniform:4").checkpoint.layers, 4);
  const auto b = pm::parse_recompute_choice("block:3");
  EXPECT_EQ(b.checkpoint, (pm::LayerCheckpoint{pm::Checkpoint::Block, 3}));
  for (const char* word : {"none", "full", "except-last", "selective", "uniform:1", "uniform:8", "block:2"}) {
    EXPECT_EQ(pm::recompute_choice_name(pm::parse_recompute_choice(word)), word);
  }
  EXPECT_NE(error_of([] { pm::parse_recompute_choice("block"); }).find("needs its layer count: block:N"), std::string::npos);
  EXPECT_NE(error_of([] { pm::parse_recompute_choice("uniform:0"); }).find("must be a positive integer"), std::string::npos);
  EXPECT_NE(error_of([] { pm::parse_recompute_choice("uniform:2x"); }).find("must be a positive integer"), std::string::npos);
  const auto unknown = error_of([] { pm::parse_recompute_choice("half"); });
  EXPECT_NE(unknown.find("unknown recompute policy 'half'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("selective, uniform[:N], block:N"), std::string::npos) << unknown;
}

// ---- Selective: the attention core's stash gone, its forward in the backward --------------------

TEST(Recompute, SelectiveDropsTheCoreAndRerunsItInTheBackward) {
  const auto spec = gpt(8, 1024, 16, 1024);
  const auto model = model_of(spec);
  const auto hw = pm::preset("dgx-a100-80gb");
  Layout none{8, 2, 1, 8, true}, sel = none;
  sel.recompute = "selective";
  const pm::StageCostModel a(model, hw, request_of(none)), b(model, hw, request_of(sel));
  // One block (layer 1), one micro-batch of one sample: Korthikanti et al.'s
  // 5as² bytes of scores, split over T, no longer kept.
  const double s = 1024, heads = 16, T = 8;
  EXPECT_NEAR(a.activation_bytes(1, 2) - b.activation_bytes(1, 2), 5 * heads * s * s / T, 1.0);
  // The backward re-runs QKᵀ and AV, 4s²h FLOPs, on top of the same backward.
  EXPECT_GT(b.input_grad_s(1, 2, 0), a.input_grad_s(1, 2, 0));
  EXPECT_DOUBLE_EQ(b.weight_grad_s(1, 2, 0), a.weight_grad_s(1, 2, 0));
  EXPECT_DOUBLE_EQ(b.forward_s(1, 2, 0), a.forward_s(1, 2, 0));
  // Korthikanti et al.: selective recompute costs a few percent of the layer, full about a forward.
  const double extra = (b.input_grad_s(1, 2, 0) - a.input_grad_s(1, 2, 0)) / a.forward_s(1, 2, 0);
  EXPECT_GT(extra, 0.02);
  EXPECT_LT(extra, 0.35);
  // No R action, and the schedule checkpoints nothing.
  EXPECT_EQ(b.scheduled_forward_s(0, 5, 0), b.forward_s(0, 5, 0));
  EXPECT_EQ(b.compute_s(0, 5, 0), b.forward_s(0, 5, 0) + b.backward_s(0, 5, 0));
  // Under flash attention nothing is freed (no scores are kept).
  auto flash = spec;
  flash.flash_attention = true;
  const auto fm = model_of(flash);
  const pm::StageCostModel fa(fm, hw, request_of(none)), fb(fm, hw, request_of(sel));
  EXPECT_DOUBLE_EQ(fa.activation_bytes(1, 5), fb.activation_bytes(1, 5));
}

// ---- Full by layer: each checkpoint's input kept, one re-materialized at a time ----------------

TEST(Recompute, UniformKeepsEachGroupsInputAndNeverRerunsTheHead) {
  const std::int64_t L = 8, h = 1024, s = 1024;
  const auto model = model_of(gpt(L, h, 16, s));
  const auto hw = pm::preset("dgx-a100-80gb");
  Layout full{1, 2, 1, 4, false, false, "full"}, u1 = full, u2 = full, b3 = full;
  u1.recompute = "uniform:1", u2.recompute = "uniform:2", b3.recompute = "block:3";
  const pm::StageCostModel st(model, hw, request_of(full)), one(model, hw, request_of(u1)), two(model, hw, request_of(u2)),
      blk(model, hw, request_of(b3));
  const auto [i0, j0] = stage_layers(L, 2, 0);  // embedding + 4 blocks
  const auto [i1, j1] = stage_layers(L, 2, 1);  // 4 blocks + head
  const double input = 2.0 * s * h;             // one block's input, 16-bit, one sample
  // The whole stage (torchgpipe) keeps its input; by layer each group's.
  EXPECT_DOUBLE_EQ(st.checkpoint_stash_bytes(i1, j1), input);
  const double head = st.activation_bytes(j1 - 1, j1);
  EXPECT_NEAR(one.checkpoint_stash_bytes(i1, j1), 4 * input + head, 1.0);
  EXPECT_NEAR(two.checkpoint_stash_bytes(i1, j1), 2 * input + head, 1.0);
  // Block 3: the first three blocks' inputs, the fourth block's and the head's stash.
  const double block = st.activation_bytes(i1, i1 + 1);
  EXPECT_NEAR(blk.checkpoint_stash_bytes(i1, j1), 3 * input + block + head, 1.0);
  // Re-materialized: one group on top (less its input, kept already).
  EXPECT_NEAR(one.whole_stash_bytes(i1, j1), 4 * input + head + block - input, 1.0);
  EXPECT_NEAR(two.whole_stash_bytes(i1, j1), 2 * input + head + 2 * block - input, 1.0);
  EXPECT_LT(one.whole_stash_bytes(i1, j1), st.whole_stash_bytes(i1, j1));
  // The first stage: the embedding keeps its dropout mask, never recomputed.
  const double embedding = st.activation_bytes(0, 1);
  EXPECT_GT(embedding, 0);
  EXPECT_NEAR(one.checkpoint_stash_bytes(i0, j0), embedding + 4 * input, 1.0);
  // R re-runs the blocks only; the stage's R also the head.
  EXPECT_DOUBLE_EQ(one.recompute_action_s(i1, j1, 1), st.recompute_s(i1, j1 - 1, 1));
  EXPECT_LT(one.recompute_action_s(i1, j1, 1), st.recompute_action_s(i1, j1, 1));
  EXPECT_DOUBLE_EQ(blk.recompute_action_s(i1, j1, 1), st.recompute_s(i1, i1 + 3, 1));
  // F runs the checkpointed blocks without autograd, the head with it.
  EXPECT_DOUBLE_EQ(one.scheduled_forward_s(i1, j1, 1),
                   st.forward_s(i1, j1, 1) - (st.forward_s(i1, j1 - 1, 1) - st.forward_nograd_s(i1, j1 - 1, 1)));
  // The peak of 1F1B's last rank: one micro-batch, re-materialized.
  EXPECT_NEAR(one.memory_parts(i1, j1, 1).activations, one.whole_stash_bytes(i1, j1), 1.0);
  // By layer needs every micro-batch checkpointed.
  Layout bad = u1;
  auto r = request_of(bad);
  r.program = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::ExceptLast});
  EXPECT_NE(error_of([&] { pm::StageCostModel(model, hw, r); }).find("needs the schedule's recompute full"), std::string::npos);
}

// ---- The first rank's memory against Megatron-LM -----------------------------------------------

TEST(Recompute, FirstRankMemoryAgreesWithMegatron) {
  struct Config {
    std::int64_t h, layers, heads;
    int T, K, gpus;
  };
  const auto hw = pm::preset("selene");
  double worst = 0;
  // Narayanan et al. (SC'21), Table 1: 1.7 B, 7.5 B, 39.1 B, 145.6 B, 1 T.
  for (const Config& c : {Config{2304, 24, 24, 1, 1, 32}, Config{4096, 36, 32, 4, 1, 128}, Config{8192, 48, 64, 8, 2, 512},
                          Config{12288, 80, 96, 8, 8, 1536}, Config{25600, 128, 160, 8, 64, 3072}}) {
    const auto spec = gpt(c.layers, c.h, c.heads, 2048);
    const auto model = model_of(spec);
    const int D = c.gpus / (c.T * c.K);
    for (const bool zero : {false, true}) {
      for (const char* recompute : {"selective", "uniform:1"}) {
        const Layout setup{c.T, c.K, D, 2 * c.K, true, zero, recompute};
        const pm::StageCostModel costs(model, hw, request_of(setup));
        const auto [i, j] = stage_layers(c.layers, c.K, 0);
        const auto parts = costs.memory_parts(i, j, 0);
        const pt::MegatronArgs a{static_cast<double>(c.h), static_cast<double>(c.layers), static_cast<double>(c.heads),
                                 4.0 * c.h, 51200, 2048, 1, static_cast<double>(c.T), static_cast<double>(c.K),
                                 static_cast<double>(D), zero, std::nullopt};
        // The learned position table (2048·h, whole on the first rank) the script leaves out.
        const double per_param = zero ? 6 + 12.0 / D : 18;
        const double states = pt::megatron_weight_and_optimizer(a) + 2048.0 * c.h * per_param;
        double activations = 0;
        if (std::string(recompute) == "selective") {
          activations = pt::megatron_activation(a);
        } else {
          // Korthikanti et al. Table 2, full recompute with sequence
          // parallelism: 2sbh/T a layer; the script's embedding terms, and
          // the head's with K = 1 (K micro-batches in flight on the first
          // rank). The table counts the checkpoints only: the layer being
          // re-materialized in the backward holds its whole stash meanwhile,
          // sbh/T·(34 + 5as/h) (the same table, no recompute).
          const double sbh = 2048.0 * c.h;
          activations = (2 * sbh * c.layers + 8 * 2048.0 * c.K + sbh * c.K +
                         (c.K == 1 ? sbh * 4 * (1 + 51200.0 / c.h) : 0) +
                         sbh * (34 + 5.0 * c.heads * 2048 / c.h)) / c.T;
        }
        // The stash and the states: a backward's workspace (the score
        // gradients of a materialized softmax) is apart, as in the script.
        const double ours = parts.weights + parts.gradients + parts.optimizer + parts.activations;
        const double theirs = states + activations;
        const double d = std::abs(ours - theirs) / theirs;
        worst = std::max(worst, d);
        EXPECT_LT(d, 0.005) << "h " << c.h << " T " << c.T << " K " << c.K << " D " << D << " zero " << zero << " "
                           << recompute << ": ours " << ours / 1e9 << " GB, Megatron " << theirs / 1e9 << " GB";
        EXPECT_DOUBLE_EQ(parts.reserve, 1.5e9);  // selene reserves 1.5 GB (presets/selene.yaml), left out above
        std::printf("h %5lld T %d K %2d D %3d zero %d %-9s  ours %8.3f GB (activations %7.3f)  Megatron %8.3f GB  (%+.3f%%)\n",
                    static_cast<long long>(c.h), c.T, c.K, D, zero, recompute, ours / 1e9, parts.activations / 1e9,
                    theirs / 1e9, 100 * (ours - theirs) / theirs);
      }
    }
  }
  std::printf("worst relative difference against Megatron: %.3f%%\n", 100 * worst);
}

// ---- The parts add up, and a reserve comes on top -----------------------------------------------

TEST(Recompute, MemoryPartsAddUpWithTheDevicesReserve) {
  const auto model = model_of(gpt(8, 1024, 16, 1024));
  auto hw = pm::preset("dgx-a100-80gb");
  EXPECT_DOUBLE_EQ(hw.device.memory_reserve_bytes, 1.5e9);  // the preset's allowance
  hw.device.memory_reserve_bytes = 0;
  const Layout c{2, 2, 2, 4, true, true, "none"};
  const pm::StageCostModel plain(model, hw, request_of(c));
  hw.device.memory_reserve_bytes = 2e9, hw.device.memory_reserve_fraction = 0.05;
  const pm::StageCostModel reserved(model, hw, request_of(c));
  const auto p = plain.memory_parts(0, 5, 0), r = reserved.memory_parts(0, 5, 0);
  EXPECT_DOUBLE_EQ(p.total(), plain.memory_bytes(0, 5, 0));
  EXPECT_DOUBLE_EQ(p.weights + p.gradients + p.optimizer, plain.static_bytes(0, 5, 0));
  EXPECT_DOUBLE_EQ(p.reserve, 0.0);
  const double rest = p.total();
  EXPECT_NEAR(r.reserve, 2e9 + 0.05 * rest, 1.0);
  EXPECT_NEAR(reserved.memory_bytes(0, 5, 0), 2e9 + 1.05 * rest, 1.0);
  // bf16 weights, fp32 gradients, ZeRO-1's master copy and moments over D = 2.
  EXPECT_DOUBLE_EQ(p.gradients, 2 * p.weights);
  EXPECT_DOUBLE_EQ(p.optimizer, 3 * p.weights);
}

// ---- torchtitan's op policy: the saved operators' outputs, the rest re-run in the backward -------

namespace {

// Llama 3 8B's block (torchtitan's llama3 8B): SwiGLU, RMSNorm, 8 of 32
// heads for K and V, no biases, no dropout, flash attention.
pm::LlmSpec llama(std::int64_t layers, std::int64_t s) {
  pm::LlmSpec t;
  t.layers = layers, t.hidden = 4096, t.ffn_hidden = 14336, t.heads = 32, t.kv_heads = 8, t.seq_len = s;
  t.vocab = 128256;
  t.mlp = pm::LlmSpec::Mlp::SwiGlu;
  t.norm = pm::LlmSpec::Norm::RmsNorm;
  t.positions = pm::LlmSpec::Positions::Rotary;
  t.flash_attention = true;
  return t;
}

}  // namespace

TEST(Recompute, OpKeepsEveryOtherProductAndTheAttentionKernelsOutput) {
  const double s = 8192, h = 4096, kv = 1024, f = 14336, a = 32;
  const auto model = pm::llm_model(llama(8, 8192), pm::Precision::BF16, "llama");
  const auto hw = pm::preset("dgx-h100");
  EXPECT_EQ(pm::recompute_choice_name(pm::parse_recompute_choice("op")), "op");
  EXPECT_TRUE(pm::parse_recompute_choice("op").checkpoint.by_op());
  EXPECT_FALSE(pm::parse_recompute_choice("op").checkpoint.by_layer());
  Layout none{1, 2, 1, 4}, op = none, u1 = none, sel = none;
  op.recompute = "op", u1.recompute = "uniform:1", sel.recompute = "selective";
  const pm::StageCostModel a0(model, hw, request_of(none)), b(model, hw, request_of(op)), u(model, hw, request_of(u1)),
      se(model, hw, request_of(sel));
  // Per block and sample, 16-bit: its input, Q, V, the kernel's output and
  // fp32 log-sum-exp, the gate's and the down projection's outputs.
  const double saved = 2 * s * (h + h + kv + h + f + h) + 4 * a * s;
  EXPECT_NEAR(b.activation_bytes(1, 2), saved, 2.0);
  // Korthikanti et al.'s terms for this block, all kept: 2s(6h + 2kv + 3f).
  EXPECT_NEAR(a0.activation_bytes(1, 2), 2 * s * (6 * h + 2 * kv + 3 * f), 2.0);
  // Between selective (which frees nothing under flash attention) and uniform:1 (the input only).
  EXPECT_LT(b.activation_bytes(1, 5), se.activation_bytes(1, 5));
  EXPECT_GT(b.activation_bytes(1, 5), u.checkpoint_stash_bytes(1, 5));
  // The embedding and the head are not checkpointed: their stash is whole.
  EXPECT_DOUBLE_EQ(b.activation_bytes(9, 10), a0.activation_bytes(9, 10));
  // The backward re-materializes one block's unsaved activations: its workspace.
  EXPECT_NEAR(b.workspace_bytes(1, 2) - a0.workspace_bytes(1, 2), a0.activation_bytes(1, 2) - saved, 2.0);
  // No R action; each block's backward re-runs K, the output and the up
  // projection, 2sh(kv + h + f) of its forward's FLOPs, and its elementwise
  // kernels: more than that share of a recompute, less than a whole one.
  EXPECT_EQ(b.compute_s(1, 5, 0), b.forward_s(1, 5, 0) + b.backward_s(1, 5, 0));
  const double extra = b.input_grad_s(1, 2, 0) - a0.input_grad_s(1, 2, 0);
  const double share = 2 * s * h * (kv + h + f) / (2 * s * (2 * h * h + 2 * h * kv + 3 * h * f) + 4 * s * s * h);
  EXPECT_GT(extra, share * a0.recompute_s(1, 2, 0));
  EXPECT_LT(extra, a0.recompute_s(1, 2, 0));
  EXPECT_DOUBLE_EQ(b.weight_grad_s(1, 2, 0), a0.weight_grad_s(1, 2, 0));
  // Tensor parallelism with sequence parallelism: the down projection's
  // output before its reduce-scatter stays whole, the rest splits over T.
  Layout op2{2, 2, 1, 4, true, false, "op"};
  const pm::StageCostModel t2(model, hw, request_of(op2));
  EXPECT_NEAR(t2.activation_bytes(1, 2), 2 * s * h + (saved - 2 * s * h) / 2, 2.0);
  // Only the llm family describes its operators.
  const auto tiny = pm::transformer_model({4, 64, 256, 4, 32, 0}, pm::Precision::FP32, "tiny");
  const auto e = error_of([&] { pm::StageCostModel(tiny, hw, request_of(op)); });
  EXPECT_NE(e.find("recompute op"), std::string::npos) << e;
  EXPECT_NE(e.find("llm family"), std::string::npos) << e;
}
