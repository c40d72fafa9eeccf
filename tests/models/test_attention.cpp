// A fused attention kernel at its own measured rates (Device::attention):
// the rates read by sequence length, the core's forward and backward time
// against the closed forms written here (FlashAttention's FLOP count: half
// the square under a causal mask, the backward 2.5 times the forward), its
// share under tensor and context parallelism and selective recompute, the
// products left on the device's curve, and the file's errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

pm::LlmSpec spec() {
  pm::LlmSpec t;  // Llama-like, flash attention
  t.layers = 4, t.hidden = 1024, t.ffn_hidden = 3584, t.heads = 16, t.kv_heads = 4, t.seq_len = 2048, t.vocab = 32000;
  t.mlp = pm::LlmSpec::Mlp::SwiGlu, t.norm = pm::LlmSpec::Norm::RmsNorm, t.positions = pm::LlmSpec::Positions::Rotary;
  return t;
}

// examples/h100-flash2.yaml (FlashAttention-2's published rates) with a flat
// efficiency and no fixed costs.
pm::Hardware flat_flash2() {
  auto hw = pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/h100-flash2.yaml");
  hw.device.efficiency = {0.5, 0, {}};
  hw.device.op_overhead_s = 0;
  hw.device.memory_efficiency = 1;
  return hw;
}

pm::PartitionRequest request(int T = 1, int C = 1, ps::RecomputePolicy policy = ps::RecomputePolicy::None) {
  pm::PartitionRequest r;
  r.program = ps::build_schedule("1f1b", {1, 4, 1, policy});
  r.program.tensor_parallel = T, r.program.data_parallel = C, r.program.context_parallel = C;
  return r;
}

std::string error_of(const std::string& yaml) {
  try {
    pm::hardware_from_yaml(pm::YamlFields(pm::parse_yaml(yaml, "hw.yaml"), "hw.yaml"));
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST(Attention, RatesByLengthAreLogLinearAndHeldBeyondTheEnds) {
  pm::AttentionRates r;
  r.forward = {{1024, 300e12}, {4096, 400e12}};
  r.forward_causal = {{1024, 200e12}, {4096, 320e12}};
  r.backward = {{1024, 250e12}, {4096, 350e12}};
  const double F = 1e12;  // the full square's forward FLOPs
  EXPECT_DOUBLE_EQ(r.forward_seconds(F, 1024, false), F / 300e12);
  EXPECT_DOUBLE_EQ(r.forward_seconds(F, 1024, true), F / 2 / 200e12);
  // 2048 is halfway in log2 between 1024 and 4096.
  EXPECT_DOUBLE_EQ(r.forward_seconds(F, 2048, false), F / 350e12);
  EXPECT_DOUBLE_EQ(r.forward_seconds(F, 2048, true), F / 2 / 260e12);
  // Held beyond the ends.
  EXPECT_DOUBLE_EQ(r.forward_seconds(F, 100, false), F / 300e12);
  EXPECT_DOUBLE_EQ(r.forward_seconds(F, 1 << 20, false), F / 400e12);
  // Backward: 2.5 times the forward's FLOPs; causal without its own curve at
  // backward's rate times the forward's causal-to-full ratio.
  EXPECT_DOUBLE_EQ(r.backward_seconds(F, 4096, false), 2.5 * F / 350e12);
  EXPECT_DOUBLE_EQ(r.backward_seconds(F, 4096, true), 2.5 * F / 2 / (350e12 * 320.0 / 400.0));
  r.backward_causal = {{1024, 100e12}};
  EXPECT_DOUBLE_EQ(r.backward_seconds(F, 4096, true), 2.5 * F / 2 / 100e12);
  EXPECT_EQ(r.forward_seconds(0, 4096, true), 0);
}

TEST(Attention, TheCoreRunsAtTheKernelsRatesTheProductsOnTheCurve) {
  const auto t = spec();
  const auto model = pm::llm_model(t, pm::Precision::BF16, "llama");
  const auto hw = flat_flash2();
  auto plain = hw;
  plain.device.attention = {};
  const auto& d = hw.device;
  const double s = t.seq_len, h = t.hidden, f = t.ffn_hidden, kv = static_cast<double>(t.kv());
  const double products = 2 * s * (2 * h * h + 2 * h * kv + 3 * h * f), core = 4 * s * s * h;
  const double half = d.peak_flops_half * 0.5, bw = d.memory_bandwidth;
  // FlashAttention-2 at 2048 tokens: 298 TFLOP/s causal forward; the causal
  // backward 291 x 298 / 362.
  const double fwd_rate = 298e12, bwd_rate = 291e12 * 298.0 / 362.0;
  const auto& c = model.layers[1].cost;
  ASSERT_EQ(c.attention_seq, 2048);
  ASSERT_TRUE(c.attention_causal);
  for (const int T : {1, 2}) {
    const pm::StageCostModel a(model, hw, request(T)), p(model, plain, request(T));
    const double fwd_core = core / 2 / T / fwd_rate, bwd_core = 2.5 * core / 2 / T / bwd_rate;
    const double fwd_traffic = (c.forward_traffic_replicated + (c.forward_traffic - c.forward_traffic_replicated) / T) / bw;
    const double bwd_traffic = (c.backward_traffic_replicated + (c.backward_traffic - c.backward_traffic_replicated) / T) / bw;
    const double tp = a.tp_forward_s(1, 2);  // the same collectives either way
    EXPECT_NEAR(a.forward_s(1, 2, 0), products / T / half + fwd_core + fwd_traffic + tp, 1e-12) << T;
    EXPECT_NEAR(a.input_grad_s(1, 2, 0) - a.tp_backward_s(1, 2), products / T / half + bwd_core + bwd_traffic, 1e-12) << T;
    // W has no attention: as without the rates.
    EXPECT_DOUBLE_EQ(a.weight_grad_s(1, 2, 0), p.weight_grad_s(1, 2, 0));
    // Without rates the core stays on the device's curve: the full square, twice in the backward.
    EXPECT_NEAR(p.forward_s(1, 2, 0), (products + core) / T / half + fwd_traffic + tp, 1e-12) << T;
    // The embedding and the head have no attention.
    const int n = static_cast<int>(model.layers.size());
    for (const int l : {0, n - 1}) {
      EXPECT_DOUBLE_EQ(a.forward_s(l, l + 1, 0), p.forward_s(l, l + 1, 0)) << l;
      EXPECT_DOUBLE_EQ(a.input_grad_s(l, l + 1, 0), p.input_grad_s(l, l + 1, 0)) << l;
    }
  }
}

TEST(Attention, SelectiveRecomputeAndContextParallelismUseTheKernelsTime) {
  const auto t = spec();
  const auto model = pm::llm_model(t, pm::Precision::BF16, "llama");
  const auto hw = flat_flash2();
  const double s = t.seq_len, h = t.hidden, core = 4 * s * s * h;
  // Selective recompute re-runs the core's forward inside the backward.
  const pm::StageCostModel none(model, hw, request()), sel(model, hw, request(1, 1, ps::RecomputePolicy::Selective));
  EXPECT_NEAR(sel.input_grad_s(1, 2, 0) - none.input_grad_s(1, 2, 0), core / 2 / 298e12, 1e-12);
  // C = 2: each rank's half of the causal core over 1024-token chunks
  // (260 TFLOP/s forward, 260 x 260 / 350 backward) in place of half the
  // square on the curve (the keys' and values' passing hidden in both).
  auto plain = hw;
  plain.device.attention = {};
  const pm::StageCostModel a(model, hw, request(1, 2)), p(model, plain, request(1, 2));
  const double half = hw.device.peak_flops_half * 0.5;
  EXPECT_NEAR(a.forward_s(1, 2, 0) - p.forward_s(1, 2, 0), core / 2 / 2 / 260e12 - core / 2 / half, 1e-12);
  EXPECT_NEAR(a.input_grad_s(1, 2, 0) - p.input_grad_s(1, 2, 0),
              2.5 * core / 2 / 2 / (260e12 * 260.0 / 350.0) - 2 * core / 2 / half, 1e-12);
}

TEST(Attention, TheFileReadsBackAndItsErrorsNameTheField) {
  const auto hw = pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/h100-flash2.yaml");
  ASSERT_EQ(hw.device.attention.forward_causal.size(), 6u);
  EXPECT_DOUBLE_EQ(hw.device.attention.forward_causal.back().second, 335e12);
  const auto back = pm::hardware_from_yaml(pm::YamlFields(pm::parse_yaml(pm::hardware_to_yaml(hw), "back.yaml"), "back.yaml"));
  EXPECT_EQ(back.device.attention, hw.device.attention);
  const std::string head = "preset: h100\ndevice:\n  attention:\n";
  const std::string fwd = "    forward: [[512, 300]]\n    backward: [[512, 200]]\n";
  EXPECT_NE(error_of(head + fwd).find("forward_causal': missing"), std::string::npos) << error_of(head + fwd);
  EXPECT_NE(error_of(head + fwd + "    forward_causal: [[1024, 200], [512, 250]]\n").find("lengths must increase"), std::string::npos);
  EXPECT_NE(error_of(head + fwd + "    forward_causal: [[512, -1]]\n").find("TFLOP/s must be positive"), std::string::npos);
  EXPECT_NE(error_of(head + fwd + "    forward_causal: [[512, 1]]\n    flash: 3\n").find("flash"), std::string::npos);
  EXPECT_EQ(error_of(head + fwd + "    forward_causal: [[512, 250]]\n"), "(accepted)");
}
