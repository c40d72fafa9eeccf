// exec/'s LibTorch layers against models/' description of them: the same
// parameter counts and output sizes for every layer of every family, cuts
// that carry every crossing tensor, the I/W split giving B's gradients, and
// the bytes a forward keeps for backward against the model's accounting.
#include <gtest/gtest.h>

#include <numeric>

#include "exec/torch_checkpoint.hpp"
#include "exec/torch_layers.hpp"
#include "exec/torch_memory.hpp"
#include "exec/torch_stage.hpp"
#include "exec/torch_task.hpp"
#include "models/families.hpp"
#include "models/layer_graph.hpp"
#include "models/stage_costs.hpp"
#include "schedule/error.hpp"

namespace pe = pipetwin::exec;
namespace pm = pipetwin::models;

namespace {

// Llama (GQA, SwiGLU, RMSNorm, rotary, no biases), Qwen2 (the same with
// q/k/v biases) and GPT-2 (LayerNorm, GELU, a learned position table longer
// than the sequence, biases everywhere but the head), untied.
pm::Model tiny_llm(const std::string& family) {
  pm::LlmSpec t;
  t.layers = 2;
  t.hidden = 32;
  t.heads = 4;
  t.seq_len = 8;
  t.vocab = 40;
  if (family == "gpt2") {
    t.ffn_hidden = 64;
    t.mlp = pm::LlmSpec::Mlp::Gelu;
    t.norm = pm::LlmSpec::Norm::LayerNorm;
    t.positions = pm::LlmSpec::Positions::Learned;
    t.max_positions = 12;
    t.bias = true;
  } else {
    t.ffn_hidden = 48;
    t.kv_heads = 2;
    t.qkv_bias = family == "qwen2";
  }
  return pm::llm_model(t, pm::Precision::FP32, family);
}

// Qwen3's shape, scaled down: a dense block, then routed ones over 4
// experts (top 2) beside a shared one; heads of their own width with Q and K
// norms.
pm::Model tiny_moe() {
  pm::MoeSpec t;
  t.llm.layers = 3;
  t.llm.hidden = 32;
  t.llm.heads = 4;
  t.llm.kv_heads = 2;
  t.llm.seq_len = 8;
  t.llm.vocab = 40;
  t.llm.ffn_hidden = 48;
  t.head_dim = 16;
  t.qk_norm = true;
  t.experts = 4;
  t.top_k = 2;
  t.expert_ffn_hidden = 16;
  t.shared_experts = 1;
  t.dense_layers = 1;
  return pm::moe_model(t, pm::Precision::FP32, "moe");
}

pm::Model tiny(const std::string& family) {
  if (family == "moe") return tiny_moe();
  if (family == "transformer") return pm::transformer_model({3, 32, 64, 4, 16, 50}, pm::Precision::FP32, "t");
  if (family == "mlp") return pm::mlp_model({24, 5, {32, 16}}, pm::Precision::FP32, "m");
  if (family == "llama" || family == "qwen2" || family == "gpt2") return tiny_llm(family);
  if (family == "resnet") return pm::resnet_model({8, 3, 8, 4, {1, 1}}, pm::Precision::FP32, "r");
  return pm::in_topological_order(pm::amoebanet_model({3, 4, 16, 3, 5}, pm::Precision::FP32, "a"));
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

class Families : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(Families, EveryLayerHasTheModelsParametersAndOutputSize) {
  const auto m = tiny(GetParam());
  for (int l = 0; l < static_cast<int>(m.layers.size()); ++l) {
    std::int64_t params = 0;
    for (const auto& t : pe::init_layer(m, l, 7)) params += t.numel();
    EXPECT_EQ(params, m.layers[l].cost.params) << m.layers[l].name;
    if (!pe::is_loss_layer(m, l)) {
      EXPECT_EQ(numel(pe::output_shape(m, l)), m.layers[l].cost.output_elems) << m.layers[l].name;
    }
  }
}

TEST_P(Families, WholeModelForwardGivesAFiniteLossAndGradientsEverywhere) {
  const auto m = tiny(GetParam());
  const int n = static_cast<int>(m.layers.size());
  pe::Stage stage(m, 0, {0, n}, true, 1, 3, at::kCPU, pm::Optimizer::SGD, 0.1);
  const pe::SyntheticTask task(m, 3, 4);
  const auto batch = task.minibatch(0);
  const auto loss = stage.forward({batch.inputs}, stage.params(stage.acquire()), batch.targets);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_TRUE(std::isfinite(loss[0].item<double>()));
  loss[0].backward();
  for (const auto& layer : stage.params(0)) {
    for (const auto& p : layer) EXPECT_TRUE(p.grad().defined());
  }
}

TEST_P(Families, CutsCarryEveryCrossingTensorOnce) {
  const auto m = tiny(GetParam());
  const auto elems = m.cut_elems();
  for (int p = 1; p < static_cast<int>(m.layers.size()); ++p) {
    std::int64_t carried = 0;
    for (const auto& c : pe::cut_tensors(m, p)) carried += numel(c.shape);
    EXPECT_EQ(carried, elems.at(p)) << "cut before layer " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, Families,
                         ::testing::Values("transformer", "mlp", "resnet", "amoebanet", "llama", "qwen2", "gpt2", "moe"));

// Causal attention: a token changed at the end changes no earlier position.
TEST(Llm, BlocksAreCausal) {
  for (const std::string family : {"llama", "gpt2"}) {
    const auto m = tiny_llm(family);
    const auto params = pe::init_layer(m, 1, 3);
    torch::manual_seed(0);
    const auto x = torch::randn({2, 8, 32});
    auto y = x.clone();
    y.select(1, 7).add_(1.0);
    const auto a = pe::forward_layer(m, 1, {x}, params, {}), b = pe::forward_layer(m, 1, {y}, params, {});
    EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 7), b.narrow(1, 0, 7), 1e-5, 1e-6)) << family;
    EXPECT_FALSE(torch::allclose(a.select(1, 7), b.select(1, 7))) << family;
  }
}

// flash_attention: false materializes the causal scores (the model then
// counts their stash and traffic); the block computes the same function and
// the same input gradient as with PyTorch's fused attention.
TEST(Llm, MaterializedScoresEqualFusedAttention) {
  for (const std::string family : {"llama", "gpt2"}) {
    auto fused = tiny_llm(family), scores = fused;
    for (auto& layer : scores.layers) layer.shape.flash_attention = false;
    const auto params = pe::init_layer(fused, 1, 3);
    torch::manual_seed(1);
    const auto x = torch::randn({2, 8, 32});
    const auto x1 = x.clone().requires_grad_(true), x2 = x.clone().requires_grad_(true);
    const auto a = pe::forward_layer(fused, 1, {x1}, params, {}), b = pe::forward_layer(scores, 1, {x2}, params, {});
    EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << family;
    a.pow(2).sum().backward();
    b.pow(2).sum().backward();
    EXPECT_TRUE(torch::allclose(x1.grad(), x2.grad(), 1e-4, 1e-5)) << family;
  }
}

// Rotary (Llama) or learned (GPT-2) positions: attention without them
// would see the prefix as a set, so swapping its two tokens would not change
// the third position's output.
TEST(Llm, PositionsMatter) {
  for (const std::string family : {"llama", "gpt2"}) {
    const auto m = tiny_llm(family);
    const auto emb = pe::init_layer(m, 0, 3), blk = pe::init_layer(m, 1, 3);
    const auto out = [&](std::vector<std::int64_t> ids) {
      const auto h = pe::forward_layer(m, 0, {torch::tensor(ids, at::kLong).view({1, -1})}, emb, {});
      return pe::forward_layer(m, 1, {h}, blk, {}).select(1, 2);
    };
    EXPECT_FALSE(torch::allclose(out({3, 5, 7}), out({5, 3, 7}))) << family;
  }
}

// The executor keeps no tensor shared between layers: a tied head is refused.
TEST(Llm, TiedHeadIsRefusedNamingTheLayer) {
  pm::LlmSpec t;
  t.layers = 1;
  t.hidden = 16;
  t.ffn_hidden = 32;
  t.heads = 2;
  t.seq_len = 4;
  t.vocab = 10;
  t.tied_embeddings = true;
  const auto m = pm::llm_model(t, pm::Precision::FP32, "tied");
  try {
    pe::init_layer(m, 2, 1);
    FAIL() << "a tied head was built";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("head"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tied_embeddings: false"), std::string::npos) << e.what();
  }
}

TEST(Layers, AmoebaNetHasCutsOfSeveralTensors) {
  const auto m = tiny("amoebanet");
  std::size_t widest = 0;
  for (int p = 1; p < static_cast<int>(m.layers.size()); ++p) widest = std::max(widest, pe::cut_tensors(m, p).size());
  EXPECT_GE(widest, 2u);
}

TEST(Layers, InputGradientThenWeightGradientEqualsTheFullBackward) {
  torch::manual_seed(0);
  const auto x = torch::randn({3, 5, 8});
  const auto w = torch::randn({6, 8}).requires_grad_(true), b = torch::randn({6}).requires_grad_(true);
  const auto g = torch::randn({3, 5, 6});
  // B: everything at once.
  auto xb = x.clone().requires_grad_(true);
  pe::linear(xb, w, b).backward(g);
  const auto gw = w.grad().clone(), gb = b.grad().clone(), gx = xb.grad().clone();
  w.mutable_grad() = at::Tensor();
  b.mutable_grad() = at::Tensor();
  // I: the input gradient only, the weight gradient queued; W: the queue.
  auto xi = x.clone().requires_grad_(true);
  pe::WeightGradQueue queue;
  {
    pe::DeferWeightGrads defer(&queue);
    pe::linear(xi, w, b).backward(g);
  }
  EXPECT_TRUE(torch::allclose(xi.grad(), gx));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(queue.empty());
  queue.run();
  EXPECT_TRUE(torch::allclose(w.grad(), gw, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(b.grad(), gb, 1e-5, 1e-6));
}

TEST(Layers, SameSeedSameWeightsWhateverTheStage) {
  const auto m = tiny("transformer");
  const auto a = pe::init_layer(m, 2, 11), b = pe::init_layer(m, 2, 11), c = pe::init_layer(m, 2, 12);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  EXPECT_FALSE(torch::equal(a[2], c[2]));
}

TEST(Layers, WeightVersionsLiveWhileAMicroBatchHoldsThem) {
  const auto m = tiny("mlp");
  pe::Stage st(m, 0, {0, 3}, true, /*weight_versions=*/3, 1, at::kCPU, pm::Optimizer::SGD, 0.1);
  const int v0 = st.acquire();
  const auto& p0 = st.params(v0);
  const auto before = p0[0][0].clone();
  st.step();  // the live weights move on; micro-batch 0 keeps version 0
  const int v1 = st.acquire();
  EXPECT_NE(v0, v1);
  EXPECT_TRUE(torch::equal(st.params(v0)[0][0], before));
  EXPECT_EQ(st.peak_versions(), 2);
  st.release(v0);
  st.release(v1);
}

// What LibTorch keeps for backward, measured per layer by the counting
// allocator, against the model's stashed elements (with which the
// partitioner and the simulator count memory). Exact for the chains
// (Transformer, MLP): each activation is kept by exactly one layer. The
// model input and the targets are data, counted by neither.
class Chains : public ::testing::TestWithParam<std::string> {};

TEST_P(Chains, StashedBytesOfEveryLayerMatchTheModel) {
  auto& meter = pe::MemoryMeter::install(64);
  const auto m = tiny(GetParam());
  const int n = static_cast<int>(m.layers.size());
  const pe::SyntheticTask task(m, 5, 4);
  const auto batch = task.minibatch(0);
  for (int l = 0; l < n; ++l) {
    const pe::Stage st(m, 0, {l, l + 1}, l + 1 == n, 1, 5, at::kCPU, pm::Optimizer::SGD, 0.1);
    std::vector<at::Tensor> leaves;
    for (const auto& c : st.in_cut()) {
      std::vector<std::int64_t> shape{4};
      shape.insert(shape.end(), c.shape.begin(), c.shape.end());
      leaves.push_back(c.producer < 0 ? batch.inputs : torch::randn(shape).requires_grad_(true));
    }
    auto params = pe::init_layer(m, l, 5);
    for (auto& p : params) p.requires_grad_(true);
    const auto before = meter.stage_bytes(9);
    {
      pe::MemoryMeter::Tag tag(meter, 9);
      std::vector<at::Tensor> inputs;  // made here: counted only if the layer keeps them
      for (const auto& x : leaves) inputs.push_back(x.requires_grad() ? x.clone() : x);
      auto out = pe::forward_layer(m, l, inputs, params, pe::is_loss_layer(m, l) ? batch.targets : at::Tensor());
      if (l + 1 < n) out.set_data(at::empty({0}));  // the executor keeps the graph, not the output
      leaves.push_back(out);                         // keep the graph alive
    }
    const double kept = static_cast<double>(meter.stage_bytes(9) - before);
    const double model = 4.0 * static_cast<double>(m.layers[l].cost.stashed_elems) * 4;
    EXPECT_NEAR(kept, model, 64) << GetParam() << " layer " << l << " " << m.layers[l].name << " ("
                           << pm::kind_name(m.layers[l].kind) << "): measured " << kept << " B, model " << model << " B";
  }
}

// A whole chain as one stage: every activation counted once.
TEST_P(Chains, StashedBytesOfAWholeStageMatchTheModel) {
  auto& meter = pe::MemoryMeter::install(64);
  const auto m = tiny(GetParam());
  const int n = static_cast<int>(m.layers.size());
  const pe::SyntheticTask task(m, 5, 4);
  const auto batch = task.minibatch(0);
  pe::Stage st(m, 0, {0, n}, true, 1, 5, at::kCPU, pm::Optimizer::SGD, 0.1);
  const auto& params = st.params(st.acquire());
  const auto before = meter.stage_bytes(9);
  std::vector<at::Tensor> loss;
  {
    pe::MemoryMeter::Tag tag(meter, 9);
    loss = st.forward({batch.inputs}, params, batch.targets);
  }
  double model = 0;
  for (const auto& l : m.layers) model += 4.0 * static_cast<double>(l.cost.stashed_elems) * 4;
  EXPECT_NEAR(static_cast<double>(meter.stage_bytes(9) - before), model, 64.0 * n) << GetParam();
}

// A stage from every split point to the end, as the executor runs it: its
// received input is kept too, which the stage cost model counts.
TEST_P(Chains, StashedBytesOfEveryLaterStageMatchTheStageCostModel) {
  auto& meter = pe::MemoryMeter::install(64);
  const auto m = tiny(GetParam());
  const int n = static_cast<int>(m.layers.size());
  const pe::SyntheticTask task(m, 5, 4);
  const auto batch = task.minibatch(0);
  pm::PartitionRequest request;
  request.microbatch_size = 4;
  const pm::StageCostModel costs(m, pm::preset("cpu"), request);
  for (int p = 1; p < n; ++p) {
    pe::Stage st(m, 0, {p, n}, true, 1, 5, at::kCPU, pm::Optimizer::SGD, 0.1);
    std::vector<at::Tensor> inputs;
    for (const auto& c : st.in_cut()) {
      std::vector<std::int64_t> shape{4};
      shape.insert(shape.end(), c.shape.begin(), c.shape.end());
      inputs.push_back(torch::randn(shape).requires_grad_(true));
    }
    const auto before = meter.stage_bytes(9);
    std::vector<at::Tensor> loss;
    {
      pe::MemoryMeter::Tag tag(meter, 9);
      loss = st.forward(inputs, st.params(st.acquire()), batch.targets);
    }
    const double kept = static_cast<double>(meter.stage_bytes(9) - before) + 4.0 * static_cast<double>(inputs[0].numel());
    EXPECT_NEAR(kept, costs.activation_bytes(p, n), 64.0 * n) << GetParam() << " from layer " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, Chains, ::testing::Values("transformer", "mlp"));

// A checkpoint keeps its inputs only and re-runs its body in the backward:
// the gradients of its inputs and of the weights its body reads equal those
// of the body run plainly, to the bit (the same products, in the same order),
// also where no input asks for a gradient (a first stage's first layer on the
// raw input: only the weights have one).
TEST(Checkpoint, GradientsEqualThoseOfThePlainBody) {
  torch::manual_seed(3);
  const at::Tensor w = torch::randn({6, 5}).requires_grad_(true), b = torch::randn({6}).requires_grad_(true);
  const auto body = [&](const std::vector<at::Tensor>& in) {
    auto h = pipetwin::exec::linear(in[0], w, b);
    return std::vector<at::Tensor>{at::gelu(h) * in[1], h.sum(-1)};
  };
  const at::Tensor x0 = torch::randn({3, 5}), y0 = torch::randn({3, 6});
  for (const bool inputs_need_grads : {true, false}) {
    std::vector<at::Tensor> grads[2];
    for (const bool checkpoint : {false, true}) {
      w.mutable_grad() = at::Tensor();
      b.mutable_grad() = at::Tensor();
      const at::Tensor x = x0.clone().requires_grad_(inputs_need_grads), y = y0.clone().requires_grad_(inputs_need_grads);
      const auto out = checkpoint ? pipetwin::exec::checkpointed(body, {x, y}) : body({x, y});
      (out[0].square().sum() + out[1].sum()).backward();
      grads[checkpoint] = {w.grad(), b.grad(), x.grad(), y.grad()};
    }
    for (std::size_t i = 0; i < (inputs_need_grads ? 4u : 2u); ++i) {
      ASSERT_TRUE(grads[1][i].defined()) << i << (inputs_need_grads ? "" : ", no input needing a gradient");
      EXPECT_TRUE(at::equal(grads[0][i], grads[1][i])) << i << ": " << (grads[0][i] - grads[1][i]).abs().max().item<double>();
    }
  }
}
