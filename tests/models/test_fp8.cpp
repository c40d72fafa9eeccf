// FP8 (precision fp8): a block's products with its weights at the device's
// FP8 rate and the rest at BF16's, the casts' traffic, the cached FP8 copies
// of the weights, against the closed forms written out here from the
// layer's shape; and the refusals that name what is missing.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

pm::LlmSpec spec() {
  pm::LlmSpec t;  // Llama-like: grouped keys and values, SwiGLU, RMSNorm, rotary positions
  t.layers = 4, t.hidden = 1024, t.ffn_hidden = 3584, t.heads = 16, t.kv_heads = 4, t.seq_len = 2048, t.vocab = 32000;
  t.mlp = pm::LlmSpec::Mlp::SwiGlu, t.norm = pm::LlmSpec::Norm::RmsNorm, t.positions = pm::LlmSpec::Positions::Rotary;
  return t;
}

// H100's rates, a flat efficiency and no fixed costs: each pass's time is its
// FLOPs over the rate plus its traffic over the bandwidth.
pm::Hardware flat_h100() {
  auto hw = pm::preset("h100");
  auto& d = hw.device;
  d.efficiency = {0.5, 0, {}};
  d.op_overhead_s = 0;
  d.memory_efficiency = 1;
  return hw;
}

pm::PartitionRequest request(int T = 1, int D = 1, int zero = 0) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {1, 4, 1, ps::RecomputePolicy::None});
  r.program.tensor_parallel = T, r.program.data_parallel = D, r.program.zero = zero;
  return r;
}

}  // namespace

TEST(Fp8, BlockProductsRunAtTheFp8RateTheRestAtBf16s) {
  const auto t = spec();
  const auto bf16 = pm::llm_model(t, pm::Precision::BF16, "llama");
  const auto fp8 = pm::with_precision(bf16, "fp8");
  const auto hw = flat_h100();
  const auto& d = hw.device;
  const pm::StageCostModel a(bf16, hw, request()), b(fp8, hw, request());
  const double s = t.seq_len, h = t.hidden, f = t.ffn_hidden, kv = static_cast<double>(t.kv());
  // A block's matrices: Q and the output h x h, K and V h x kv, gate, up and down h x f.
  const double matrices = 2 * h * h + 2 * h * kv + 3 * h * f;
  const double products = 2 * s * matrices, core = 4 * s * s * h;  // per pass; the attention core's forward
  const double half = d.peak_flops_half * 0.5, eight = d.peak_flops_fp8 * 0.5, bw = d.memory_bandwidth;
  // Casts, current scaling: an amax read and a cast read of 2 bytes, the FP8
  // tensor and its transpose written, 1 byte each: 6 bytes an element. The
  // forward casts the inputs of QKV, the output, gate and up, and down; the
  // backward the output gradients of Q, K, V, the output, gate, up and down.
  const double cast_forward = 6 * s * (h + h + h + f), cast_backward = 6 * s * ((h + 2 * kv) + h + 2 * f + h);
  const auto& c = fp8.layers[1].cost;
  ASSERT_EQ(fp8.layers[1].kind, pm::LayerKind::DecoderBlock);
  EXPECT_DOUBLE_EQ(c.fp8_flops, products);
  EXPECT_EQ(c.fp8_params, static_cast<std::int64_t>(matrices));
  EXPECT_DOUBLE_EQ(c.fp8_forward_traffic, cast_forward);
  EXPECT_DOUBLE_EQ(c.fp8_backward_traffic, cast_backward);
  // Forward: the products at the FP8 rate, the core at BF16's, the block's
  // elementwise traffic and the casts'.
  EXPECT_NEAR(b.forward_s(1, 2, 0), products / eight + core / half + (c.forward_traffic + cast_forward) / bw, 1e-12);
  EXPECT_NEAR(a.forward_s(1, 2, 0), products / half + core / half + c.forward_traffic / bw, 1e-12);
  // W is products alone: exactly BF16's time times the rates' ratio.
  EXPECT_NEAR(b.weight_grad_s(1, 2, 0), a.weight_grad_s(1, 2, 0) * d.peak_flops_half / d.peak_flops_fp8, 1e-15);
  // I: the products, the core's backward (twice its forward) at BF16's rate, the traffic.
  EXPECT_NEAR(b.input_grad_s(1, 2, 0), products / eight + 2 * core / half + (c.backward_traffic + cast_backward) / bw, 1e-12);
  // The embedding and the output head run as in BF16 (neither is a block's product).
  for (const int l : {0, static_cast<int>(fp8.layers.size()) - 1}) {
    EXPECT_DOUBLE_EQ(b.forward_s(l, l + 1, 0), a.forward_s(l, l + 1, 0)) << l;
    EXPECT_DOUBLE_EQ(b.input_grad_s(l, l + 1, 0), a.input_grad_s(l, l + 1, 0)) << l;
  }
}

TEST(Fp8, SelectiveRecomputeReRunsTheCoreAtBf16sRate) {
  const auto t = spec();
  const auto fp8 = pm::llm_model(t, pm::Precision::FP8, "llama");
  const auto hw = flat_h100();
  auto selective = request();
  selective.program = ps::build_schedule("1f1b", {1, 4, 1, ps::RecomputePolicy::Selective});
  const pm::StageCostModel none(fp8, hw, request()), sel(fp8, hw, selective);
  const double s = t.seq_len, h = t.hidden;
  // The core's forward again (flash attention: nothing freed, no scores traffic).
  EXPECT_NEAR(sel.input_grad_s(1, 2, 0) - none.input_grad_s(1, 2, 0), 4 * s * s * h / (hw.device.peak_flops_half * 0.5), 1e-12);
}

TEST(Fp8, TheComputingLayersCastMatricesCountInMemory) {
  const auto t = spec();
  const auto bf16 = pm::llm_model(t, pm::Precision::BF16, "llama");
  const auto fp8 = pm::with_precision(bf16, "fp8");
  const auto hw = pm::preset("h100");
  const int n = static_cast<int>(fp8.layers.size());
  const double block = static_cast<double>(pm::llm_block_matrix_params(t));
  for (const auto& [T, D, zero] : {std::tuple{1, 1, 0}, std::tuple{2, 1, 0}, std::tuple{1, 8, 3}}) {
    const pm::StageCostModel a(bf16, hw, request(T, D, zero)), b(fp8, hw, request(T, D, zero));
    const auto pa = a.memory_parts(0, n, 0), pb = b.memory_parts(0, n, 0);
    // A block's matrices cast while it computes: an FP8 copy and its transpose, a byte each,
    // of the device's share; the weights, gradients, optimizer state and activations as in BF16.
    EXPECT_NEAR(pb.workspace - pa.workspace, 2 * block / T, 1e-6) << T << " " << zero;
    EXPECT_DOUBLE_EQ(pb.weights, pa.weights);
    EXPECT_DOUBLE_EQ(pb.gradients, pa.gradients);
    EXPECT_DOUBLE_EQ(pb.optimizer, pa.optimizer);
    EXPECT_DOUBLE_EQ(pb.activations, pa.activations);
  }
}

TEST(Fp8, RefusalsNameWhatIsMissing) {
  const auto fp8 = pm::llm_model(spec(), pm::Precision::FP8, "llama");
  try {
    pm::StageCostModel(fp8, pm::preset("a100"), request());
    FAIL() << "A100 has no FP8 rate";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("gives no FP8 rate (peak_flops_fp8)"), std::string::npos) << e.what();
  }
  const auto mlp = pm::mlp_model({8, 2, {16}}, pm::Precision::BF16, "mlp");
  EXPECT_THROW(pm::with_precision(mlp, "fp8"), pipetwin::Error);
  const auto fp32 = pm::llm_model(spec(), pm::Precision::FP32, "llama32");
  EXPECT_THROW(pm::with_precision(fp32, "fp8"), pipetwin::Error);
  EXPECT_THROW(pm::with_precision(fp8, "fp32"), pipetwin::Error);
  EXPECT_EQ(pm::with_precision(fp8, "bf16").precision, pm::Precision::BF16);
  EXPECT_EQ(pm::with_precision(fp8, "").precision, pm::Precision::FP8);
  // The presets that carry a rate give the datasheet's dense FP8 figure, twice BF16's.
  for (const char* name : {"h100", "dgx-h100", "hgx-h200"}) {
    const auto hw = pm::preset(name);
    EXPECT_DOUBLE_EQ(hw.device.peak_flops_fp8, 1979e12) << name;
  }
}
