// Mixtures of experts (family moe) and expert parallelism
// (Program::expert_parallel), against figures and closed forms written out
// here: Hugging Face's parameter counts of Mixtral-8x7B, Qwen3-30B-A3B and
// DeepSeek-V3; the general block reducing to family llm's dense block field
// by field; a routed block's FLOPs; the pairwise all-to-all on a full
// bisection; the experts' memory per device under E and ZeRO; the
// dispatch and combine in each pass's time; and the refusals.
#include <gtest/gtest.h>

#include <string>

#include "models/collectives.hpp"
#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "tests/models/flat_hardware.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

std::string example(const std::string& name) { return std::string(PIPETWIN_EXAMPLES_DIR) + "/" + name; }

pm::MoeSpec small_moe() {
  pm::MoeSpec m;
  m.llm.layers = 4, m.llm.hidden = 512, m.llm.heads = 8, m.llm.kv_heads = 2, m.llm.seq_len = 256, m.llm.vocab = 1000;
  m.llm.ffn_hidden = 1024;
  m.experts = 8, m.top_k = 2, m.expert_ffn_hidden = 1024;
  return m;
}

pm::Model parse_yaml_model(const std::string& text) { return pm::model_from_text(text, "spec.yaml", "m"); }

using pm::testing::flat;

pm::PartitionRequest request(int D, int E, int zero = 0, int b = 2) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {1, 4, 1, ps::RecomputePolicy::None});
  r.program.data_parallel = D, r.program.expert_parallel = E, r.program.zero = zero;
  r.microbatch_size = b;
  return r;
}

}  // namespace

// Hugging Face's counts (the model cards' 46.7B, 30.5B and 671B), every
// parameter of the safetensors but DeepSeek-V3's multi-token prediction module.
TEST(Moe, PublishedParameterCounts) {
  EXPECT_EQ(pm::load_model(example("mixtral-8x7b.json")).params(), 46'702'792'704);
  EXPECT_EQ(pm::load_model(example("qwen3-30b-a3b.json")).params(), 30'532'122'624);
  const auto v3 = pm::load_model(example("deepseek-v3.json"));
  EXPECT_EQ(v3.params(), 671'026'419'200);
  EXPECT_EQ(v3.family, "moe");
  // Its first three blocks are dense, the other 58 routed.
  int dense = 0, routed = 0;
  for (const auto& l : v3.layers) {
    dense += l.kind == pm::LayerKind::DecoderBlock;
    routed += l.kind == pm::LayerKind::MoeBlock;
  }
  EXPECT_EQ(dense, 3);
  EXPECT_EQ(routed, 58);
  // "37B activated for each token": the weights one token's forward uses.
  const auto c = pm::parse_hf_config(ps::read_file(example("deepseek-v3.json")), "deepseek-v3.json");
  EXPECT_NEAR(static_cast<double>(pm::moe_active_params(c.moe)) / 1e9, 37.55, 0.01);
  // The count the specs bound, in floating point, is the same.
  EXPECT_DOUBLE_EQ(pm::moe_params_estimate(c.moe), 671'026'419'200.0);
}

// With every block dense, the general block (GQA attention of hidden / heads,
// SwiGLU) is family llm's Llama block, field by field.
TEST(Moe, DenseBlocksAreTheLlmFamilysBlock) {
  pm::MoeSpec m = small_moe();
  m.dense_layers = m.llm.layers;
  for (const auto precision : {pm::Precision::BF16, pm::Precision::FP8}) {
    const auto moe = pm::moe_model(m, precision, "moe");
    const auto llm = pm::llm_model(m.llm, precision, "llm");
    ASSERT_EQ(moe.layers.size(), llm.layers.size());
    const auto& a = moe.layers[1].cost;
    const auto& b = llm.layers[1].cost;
    EXPECT_EQ(moe.layers[1].kind, pm::LayerKind::DecoderBlock);
    EXPECT_DOUBLE_EQ(a.forward_flops, b.forward_flops);
    EXPECT_DOUBLE_EQ(a.input_grad_flops, b.input_grad_flops);
    EXPECT_DOUBLE_EQ(a.weight_grad_flops, b.weight_grad_flops);
    EXPECT_EQ(a.params, b.params);
    EXPECT_EQ(a.tp_replicated_params, b.tp_replicated_params);
    EXPECT_EQ(a.stashed_elems, b.stashed_elems);
    EXPECT_EQ(a.tp_replicated_elems, b.tp_replicated_elems);
    EXPECT_EQ(a.weight_grad_elems, b.weight_grad_elems);
    EXPECT_EQ(a.weight_grad_replicated_elems, b.weight_grad_replicated_elems);
    EXPECT_DOUBLE_EQ(a.forward_traffic, b.forward_traffic);
    EXPECT_DOUBLE_EQ(a.backward_traffic, b.backward_traffic);
    EXPECT_DOUBLE_EQ(a.forward_traffic_replicated, b.forward_traffic_replicated);
    EXPECT_DOUBLE_EQ(a.backward_traffic_replicated, b.backward_traffic_replicated);
    EXPECT_DOUBLE_EQ(a.selective_flops, b.selective_flops);
    EXPECT_DOUBLE_EQ(a.fp8_flops, b.fp8_flops);
    EXPECT_EQ(a.fp8_params, b.fp8_params);
    EXPECT_DOUBLE_EQ(a.fp8_forward_traffic, b.fp8_forward_traffic);
    EXPECT_DOUBLE_EQ(a.fp8_backward_traffic, b.fp8_backward_traffic);
    EXPECT_EQ(a.cp_kv_elems, b.cp_kv_elems);
    EXPECT_EQ(a.attention_seq, b.attention_seq);
    EXPECT_EQ(a.attention_causal, b.attention_causal);
    EXPECT_EQ(a.tp_collective_elems, b.tp_collective_elems);
    // The embedding and the head are the llm family's.
    EXPECT_EQ(moe.layers.front().cost.params, llm.layers.front().cost.params);
    EXPECT_EQ(moe.layers.back().cost.params, llm.layers.back().cost.params);
  }
}

// A routed block per sample: 2 FLOPs per weight a token uses (attention, the
// router, k experts of 3·h·fe) over s tokens, plus the attention core's
// 4·s²·h; the routed experts' share apart; one dispatch moves s·k·h.
TEST(Moe, RoutedBlockFlopsAndDispatch) {
  const pm::MoeSpec m = small_moe();
  const auto model = pm::moe_model(m, pm::Precision::BF16, "moe");
  const auto& l = model.layers[1];
  ASSERT_EQ(l.kind, pm::LayerKind::MoeBlock);
  const double s = 256, h = 512, kv = 128, k = 2, fe = 1024, E = 8;
  const double attention = 2 * h * h + 2 * h * kv;
  EXPECT_DOUBLE_EQ(l.cost.forward_flops, 2 * s * (attention + h * E + k * 3 * h * fe) + 4 * s * s * h);
  EXPECT_DOUBLE_EQ(l.cost.input_grad_flops, 2 * s * (attention + h * E + k * 3 * h * fe) + 8 * s * s * h);
  EXPECT_DOUBLE_EQ(l.cost.expert_flops, 2 * s * k * 3 * h * fe);
  EXPECT_EQ(l.cost.params, static_cast<std::int64_t>(attention + E * 3 * h * fe + h * E + 2 * h));
  EXPECT_EQ(l.cost.expert_params, static_cast<std::int64_t>(E * 3 * h * fe));
  EXPECT_EQ(l.cost.dispatch_elems, static_cast<std::int64_t>(s * k * h));
  EXPECT_EQ(l.shape.experts, 8);
  EXPECT_EQ(l.shape.top_k, 2);
  // The same model from the YAML spec.
  const auto yaml = parse_yaml_model(
      "family: moe\nlayers: 4\nhidden: 512\nheads: 8\nkv_heads: 2\nseq_len: 256\nvocab: 1000\nexperts: 8\ntop_k: 2\n"
      "expert_ffn_hidden: 1024\n");
  EXPECT_EQ(yaml.params(), model.params());
  EXPECT_DOUBLE_EQ(yaml.forward_flops(), model.forward_flops());
}

// Every send at once on a full bisection (a node's non-blocking NVSwitch,
// one port per device): α + (E - 1)·X / (E·β), the collective table's
// all-to-all on that link; across nodes the NVSwitch port and the NIC side
// by side, the slower one's share the time.
TEST(Moe, AllToAllOnAFullBisection) {
  const auto hw = pm::preset("dgx-h100");
  const pm::Link nv = hw.topology.path_group(0, 1, 1);
  for (const int E : {2, 4, 8}) {
    for (const double X : {1.6e6, 64e6}) {
      const double want = nv.latency_s + (E - 1) * X / (E * nv.bandwidth);
      EXPECT_NEAR(pm::all_to_all(hw.topology, 1, E, 0, E).seconds(X), want, 1e-12 * want) << E << " " << X;
      EXPECT_NEAR(pm::collective(ps::CollectiveAlgorithm::AllToAll).seconds(nv, X, E, 1), want, 1e-9 * want);
    }
  }
  // 16 devices over two nodes of 8: 7 peers through the NVSwitch port, 8 through the NIC.
  const pm::Link net = hw.topology.path_group(0, 8, 1);
  const double X = 64e6;
  const double want = std::max(nv.latency_s, net.latency_s) +
                      std::max(7 * X / (16 * nv.bandwidth), 8 * X / (16 * net.bandwidth));
  EXPECT_NEAR(pm::all_to_all(hw.topology, 1, 16, 0, 16).seconds(X), want, 1e-12 * want);
  EXPECT_GT(8 * X / (16 * net.bandwidth), 7 * X / (16 * nv.bandwidth));  // the NIC's share the time
  EXPECT_EQ(pm::all_to_all(hw.topology, 1, 16, 0, 1).seconds(X), 0);
}

// Memory per device: the experts split over E, the rest whole; ZeRO-1
// shards every parameter's optimizer state over the D replicas (the
// experts' over the D / E of their expert-data group): Ψ/D each.
TEST(Moe, ExpertsSplitOverTheGroupAndZeroShardsTheRest) {
  const auto model = pm::moe_model(small_moe(), pm::Precision::BF16, "moe");
  const auto hw = flat("dgx-h100");
  const int n = static_cast<int>(model.layers.size());
  double experts = 0, all = 0;
  for (const auto& l : model.layers) experts += static_cast<double>(l.cost.expert_params), all += static_cast<double>(l.cost.params);
  for (const int E : {1, 2, 4, 8}) {
    const pm::StageCostModel costs(model, hw, request(8, E));
    const auto parts = costs.memory_parts(0, n, 0);
    const double held = all - experts * (1 - 1.0 / E);
    EXPECT_NEAR(parts.weights, 2 * held, 1e-6 * held) << E;  // bf16
    EXPECT_NEAR(parts.gradients, 2 * held, 1e-6 * held) << E;
    EXPECT_NEAR(parts.optimizer, 12 * held, 1e-6 * held) << E;  // fp32 master and two moments
    const pm::StageCostModel zero1(model, hw, request(8, E, 1));
    const auto z = zero1.memory_parts(0, n, 0);
    EXPECT_NEAR(z.weights, 2 * held, 1e-6 * held) << E;
    EXPECT_NEAR(z.optimizer, 12 * all / 8, 1e-6 * all) << E;
  }
  // Their gradients reduce over D / E: with E = D, nothing of the experts'.
  const pm::StageCostModel whole(model, hw, request(8, 1)), split(model, hw, request(8, 8));
  EXPECT_NEAR(split.reduce_bytes(0, n), 2 * (all - experts), 1e-6 * all);
  EXPECT_NEAR(whole.reduce_bytes(0, n), 2 * all, 1e-6 * all);
  // E = 4 of D = 8: the experts' 1/4 on a ring of 2, as bytes on the ring of 8.
  const pm::StageCostModel four(model, hw, request(8, 4));
  const double ring = (1.0 / 2) / (7.0 / 8);
  EXPECT_NEAR(four.reduce_bytes(0, n), 2 * (all - experts + experts / 4 * ring), 1e-6 * all);
}

// Each routed block's forward adds a dispatch and a combine over the
// expert group, its input gradient the same two; an imbalance of 1.5 adds
// half the experts' work and stash and scales the busiest device's share
// of the exchange.
TEST(Moe, DispatchAndCombineInEachPass) {
  pm::MoeSpec m = small_moe();
  const auto hw = flat("dgx-h100");
  const int n = m.llm.layers + 2;
  for (const double imbalance : {1.0, 1.5}) {
    m.imbalance = imbalance;
    const auto model = pm::moe_model(m, pm::Precision::BF16, "moe");
    // b = 8: compute, not the weights' reads, bounds each pass.
    const pm::StageCostModel one(model, hw, request(8, 1, 0, 8)), eight(model, hw, request(8, 8, 0, 8));
    const auto a2a = pm::all_to_all(hw.topology, 1, 8, 0, 8);
    double exchange = 0, extra_f = 0;
    for (int l = 1; l + 1 < n; ++l) {
      const auto& c = model.layers[l].cost;
      exchange += 2 * a2a.seconds(static_cast<double>(c.dispatch_elems) * 8 * 2 * imbalance);  // b = 8, bf16
      extra_f += hw.device.compute_seconds(c.expert_flops * 8 * (imbalance - 1), pm::Precision::BF16);
    }
    EXPECT_NEAR(eight.forward_s(0, n, 0) - one.forward_s(0, n, 0), exchange + extra_f, 1e-9) << imbalance;
    EXPECT_GT(exchange, 0);
    const double stash_extra = eight.activation_bytes(0, n) - one.activation_bytes(0, n);
    double want = 0;
    for (int l = 1; l + 1 < n; ++l) want += static_cast<double>(model.layers[l].cost.expert_stashed_elems) * (imbalance - 1) * 8 * 2;
    EXPECT_NEAR(stash_extra, want, 1e-6 * (want + 1)) << imbalance;
  }
  // Without expert parallelism the imbalance costs nothing: one device has every expert.
  m.imbalance = 1.5;
  const auto skewed = pm::moe_model(m, pm::Precision::BF16, "moe");
  m.imbalance = 1;
  const auto even = pm::moe_model(m, pm::Precision::BF16, "moe");
  EXPECT_DOUBLE_EQ(pm::StageCostModel(skewed, hw, request(8, 1, 0, 8)).forward_s(0, n, 0),
                   pm::StageCostModel(even, hw, request(8, 1, 0, 8)).forward_s(0, n, 0));
}

// Megatron-LM's MoE parallel folding (ETP 1): E = 4 over T = 2 and two
// replicas. Each device holds a quarter of the experts whole (as with ETP = T
// and E = 2: a quarter by matrices); it exchanges its own half of the tokens
// with the three others, one stream a route; the MLP half of each routed
// block runs no tensor collective.
TEST(Moe, FoldedExpertsSpreadOverTheTensorGroup) {
  const auto model = pm::moe_model(small_moe(), pm::Precision::BF16, "moe");
  const auto hw = flat("dgx-h100");
  const int n = static_cast<int>(model.layers.size());
  auto folded = request(2, 4);
  folded.program.tensor_parallel = 2, folded.program.sequence_parallel = true, folded.program.expert_tensor_parallel = 1;
  ASSERT_TRUE(folded.program.folds_experts());
  ASSERT_EQ(folded.program.expert_replicas(), 2);
  auto split = folded;
  split.program.expert_parallel = 2, split.program.expert_tensor_parallel = 0;
  const pm::StageCostModel a(model, hw, folded), b(model, hw, split);
  EXPECT_DOUBLE_EQ(a.memory_parts(0, n, 0).weights, b.memory_parts(0, n, 0).weights);
  double experts = 0;
  for (const auto& l : model.layers) experts += static_cast<double>(l.cost.expert_params);
  auto none = split;
  none.program.expert_parallel = 1;
  const pm::StageCostModel c(model, hw, none);
  EXPECT_NEAR(c.memory_parts(0, n, 0).weights - a.memory_parts(0, n, 0).weights, 2 * experts * (1.0 / 2 - 1.0 / 4),
              1e-6 * experts);
  // One collective each way per routed block (the attention's), two per dense one.
  const auto& l1 = model.layers[1];
  ASSERT_EQ(l1.kind, pm::LayerKind::MoeBlock);
  EXPECT_NEAR(a.tp_forward_s(1, 2), b.tp_forward_s(1, 2) / 2, 1e-15);
  EXPECT_NEAR(a.tp_backward_s(1, 2), b.tp_backward_s(1, 2) / 2, 1e-15);
  // The exchange: four devices of one node, each sending its half of the
  // micro-batch's copies: α + 3/4 · X/2 / β on one NVSwitch port.
  const pm::Link nv = hw.topology.path(0, 1);
  const double X = static_cast<double>(l1.cost.dispatch_elems) * 2 * 2;  // b = 2, bf16
  const auto a2a = pm::all_to_all_folded(hw.topology, 2, 2, 0, 2);
  EXPECT_NEAR(a2a.seconds(X / 2), nv.latency_s + 3 * X / 2 / (4 * nv.bandwidth), 1e-15);
}

TEST(Moe, RefusalsNameTheFieldOrTheMismatch) {
  const auto hw = flat("dgx-h100");
  const auto expect_error = [](const auto& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one naming " << needle;
    } catch (const pipetwin::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const auto moe = pm::moe_model(small_moe(), pm::Precision::BF16, "moe");
  expect_error([&] { pm::StageCostModel(moe, hw, request(16, 16)); }, "8 experts per layer do not split evenly over 16");
  pm::LlmSpec t = small_moe().llm;
  const auto dense = pm::llm_model(t, pm::Precision::BF16, "dense");
  expect_error([&] { pm::StageCostModel(dense, hw, request(8, 2)); }, "has none");
  const std::string base = "family: moe\nlayers: 4\nhidden: 512\nheads: 8\nseq_len: 256\nvocab: 1000\nexpert_ffn_hidden: 64\n";
  expect_error([&] { parse_yaml_model(base + "experts: 4\ntop_k: 5\n"); }, "field 'top_k'");
  expect_error([&] { parse_yaml_model(base + "experts: 4\ntop_k: 2\nimbalance: 0.5\n"); }, "field 'imbalance'");
  expect_error([&] { parse_yaml_model(base + "experts: 4\ntop_k: 2\ncapacity_factor: 0.5\n"); }, "field 'capacity_factor'");
  expect_error([&] { parse_yaml_model(base + "experts: 4\ntop_k: 2\ndense_layers: 2\n"); }, "field 'ffn_hidden'");
  expect_error([&] { parse_yaml_model(base + "experts: 4\ntop_k: 2\nqk_rope_dim: 64\n"); }, "field 'qk_rope_dim'");
  expect_error([&] { parse_yaml_model(base + "experts: 4\ntop_k: 2\nmlp: gelu\n"); }, "mlp");
  expect_error([&] { pm::parse_hf_config(R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "max_position_embeddings": 256, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
      "decoder_sparse_step": 2})", "q.json"); }, "q.json: field 'decoder_sparse_step'");
  // A capacity factor caps the busiest device's load.
  pm::MoeSpec capped = small_moe();
  capped.imbalance = 2, capped.capacity_factor = 1.25;
  EXPECT_DOUBLE_EQ(capped.load(), 1.25);
}
