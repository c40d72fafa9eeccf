// Calibrated hardware fields: per-kind efficiency curves, per-action
// overheads, the optimizer step's overhead; loading, writing and reading back,
// their errors (file:line: field), and how the stage costs use them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

class Kinds : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_kinds_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    ps::write_file_atomic(path, text);
    return path;
  }
  std::string error_of(const std::string& text) {
    const auto path = write("bad.yaml", text);
    try {
      pm::load_hardware(path);
    } catch (const pipetwin::Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  std::filesystem::path dir_;
};

const char* kCalibrated =
    "preset: cpu\n"
    "name: cpu-lab\n"
    "device:\n"
    "  op_overhead_us: 0\n"
    "  step_overhead_us: 120\n"
    "  recv_overhead_us: 40\n"
    "  recv_bandwidth_gbps: 2\n"
    "  send_bandwidth_gbps: 0.5\n"
    "  action_overhead_us: {forward: 30, backward: 50, recompute: 35}\n"
    "  kinds:\n"
    "    transformer_block:\n"
    "      forward: {max: 0.4, half_flops: 2e6}\n"
    "      backward: {max: 0.35, half_flops: 3e6}\n"
    "      forward_nograd: {max: 0.45}\n"
    "    lm_head:\n"
    "      backward: {half_flops: 1e6}\n"
    "      recompute: {points: [[1e6, 0.2], [4e6, 0.5], [1.6e7, 0.4]]}\n"
    "calibration:\n"
    "  fitted_on: [a.json]\n";

pm::Model small_transformer() {
  pm::TransformerSpec t{4, 128, 512, 4, 64, 1000};
  return pm::transformer_model(t, pm::Precision::FP32, "t");
}

}  // namespace

TEST_F(Kinds, CalibratedFieldsLoadOnTopOfAPreset) {
  const auto h = pm::load_hardware(write("hw.yaml", kCalibrated));
  const pm::Device& d = h.device;
  EXPECT_EQ(h.name, "cpu-lab");
  EXPECT_DOUBLE_EQ(d.peak_flops_fp32, 50e9);  // from the preset
  EXPECT_DOUBLE_EQ(d.op_overhead_s, 0);
  EXPECT_DOUBLE_EQ(d.step_overhead(), 120e-6);
  EXPECT_DOUBLE_EQ(d.recv_seconds(1e6), 40e-6 + 1e6 / 2e9);
  EXPECT_DOUBLE_EQ(d.action_overhead.of(pm::Pass::Forward), 30e-6);
  EXPECT_DOUBLE_EQ(d.action_overhead.of(pm::Pass::Backward), 50e-6);
  EXPECT_DOUBLE_EQ(d.action_overhead.of(pm::Pass::Recompute), 35e-6);
  EXPECT_DOUBLE_EQ(d.action_overhead.of(pm::Pass::ForwardNoGrad), 30e-6);  // defaults to forward
  ASSERT_EQ(d.kinds.size(), 2u);
  const auto& block = d.kinds.at("transformer_block");
  EXPECT_DOUBLE_EQ(block.of(pm::Pass::Forward).max, 0.4);
  EXPECT_DOUBLE_EQ(block.of(pm::Pass::ForwardNoGrad).max, 0.45);
  EXPECT_DOUBLE_EQ(block.of(pm::Pass::ForwardNoGrad).half_flops, 2e6);  // starts from forward
  EXPECT_EQ(block.of(pm::Pass::Recompute), block.forward);
  // A kind given only in part starts from the device's curve.
  const auto& head = d.kinds.at("lm_head");
  EXPECT_EQ(head.forward, pm::preset("cpu").device.efficiency);
  EXPECT_DOUBLE_EQ(head.backward.max, pm::preset("cpu").device.efficiency.max);
  EXPECT_DOUBLE_EQ(head.backward.half_flops, 1e6);
  // Points: the time w / (peak eff) linear between them and beyond the ends.
  const auto& points = head.of(pm::Pass::Recompute);
  ASSERT_EQ(points.points.size(), 3u);
  const auto time = [&](double w) { return d.layer_seconds("lm_head", pm::Pass::Recompute, w, pm::Precision::FP32); };
  EXPECT_DOUBLE_EQ(time(4e6), 4e6 / (50e9 * 0.5));
  EXPECT_NEAR(time(2.5e6), (time(1e6) + time(4e6)) / 2, 1e-18);
  EXPECT_NEAR(time(1e7), (time(4e6) + time(1.6e7)) / 2, 1e-18);
  EXPECT_NEAR(time(2.8e7) - time(1.6e7), time(1.6e7) - time(4e6), 1e-18);  // the last segment goes on
  EXPECT_DOUBLE_EQ(points.at(1e6), 0.2);
  // Layer times: the kind's curve, else the device's.
  EXPECT_DOUBLE_EQ(d.layer_seconds("transformer_block", pm::Pass::Forward, 8e6, pm::Precision::FP32),
                   8e6 / (50e9 * 0.4 * 8e6 / (8e6 + 2e6)));
  EXPECT_DOUBLE_EQ(d.layer_seconds("embedding", pm::Pass::Forward, 8e6, pm::Precision::FP32),
                   d.compute_seconds(8e6, pm::Precision::FP32));
  EXPECT_DOUBLE_EQ(d.layer_seconds("transformer_block", pm::Pass::Backward, 0, pm::Precision::FP32), 0);
}

TEST_F(Kinds, WrittenFilesReadBackToTheSameHardware) {
  pm::Hardware h = pm::load_hardware(write("hw.yaml", kCalibrated));
  h.device.transfer_overhead_s = 1.0 / 3 * 1e-5;
  h.device.memory_bandwidth = 7.123456789e9;
  h.device.cold_weights_bandwidth = 13.0987654321e9;
  h.device.memory_efficiency = 0.8765432109876;
  h.device.blocking_sends = true;
  h.device.action_overhead.forward_nograd_s = 0.1e-6;
  h.device.weight_stream = {1 / 8.765e9, 1 / 3.21e9, {}, 1 / 7.5e9};
  h.device.kinds["lm_head"].recompute = pm::Efficiency{0.123456789012345, 98765.4321, {}};
  h.device.kinds["embedding"].forward.points = {{1234.5, 0.01}, {9876.54321, 0.0123456789}};
  h.topology.intra = {12.3456789e-6, 1.987654321e9};
  h.topology.effective_cores = 1.73;
  h.topology.oversubscribed_cores = 1.61;
  h.topology.oversubscribed_send_s = 0.3e-3;
  h.topology.oversubscribed_recv_s = 0.7e-3;
  h.topology.oversubscribed_compute = 0.0625;
  h.topology.oversubscribed_action_s = 375e-6;
  h.topology.full_host_send_s = 0.11e-3;
  h.topology.full_host_recv_s = 0.09e-3;
  h.topology.run_to_completion = true;
  h.topology.time_slice_s = 2.5e-3;
  h.topology.wake_preempt_s = 0.5e-3;
  h.topology.core_affinity = true;
  h.source = "a \"quoted\" source\nover two lines";
  const std::string text = pm::hardware_to_yaml(h, "first line\n\nthird line", "calibration:\n  note: kept\n");
  EXPECT_EQ(text.rfind("# first line\n#\n# third line\n", 0), 0u) << text;
  const auto back = pm::load_hardware(write("back.yaml", text));
  EXPECT_EQ(back.name, h.name);
  EXPECT_EQ(back.source, h.source);
  EXPECT_EQ(back.device.kinds, h.device.kinds);
  EXPECT_EQ(back.device.action_overhead, h.device.action_overhead);
  EXPECT_DOUBLE_EQ(back.device.weight_stream.of(pm::Pass::Forward), h.device.weight_stream.forward_s);
  EXPECT_DOUBLE_EQ(back.device.weight_stream.of(pm::Pass::Backward), h.device.weight_stream.backward_s);
  EXPECT_DOUBLE_EQ(back.device.weight_stream.of(pm::Pass::Recompute), *h.device.weight_stream.recompute_s);
  EXPECT_DOUBLE_EQ(back.device.weight_stream.of(pm::Pass::ForwardNoGrad), h.device.weight_stream.forward_s);
  EXPECT_EQ(back.device.step_overhead_s, h.device.step_overhead_s);
  EXPECT_DOUBLE_EQ(back.device.recv_overhead_s, h.device.recv_overhead_s);
  EXPECT_DOUBLE_EQ(back.device.recv_bandwidth, h.device.recv_bandwidth);
  EXPECT_DOUBLE_EQ(back.device.send_bandwidth, h.device.send_bandwidth);
  EXPECT_DOUBLE_EQ(back.device.transfer_overhead_s, h.device.transfer_overhead_s);
  EXPECT_DOUBLE_EQ(back.device.memory_bandwidth, h.device.memory_bandwidth);
  EXPECT_DOUBLE_EQ(back.device.cold_weights_bandwidth, h.device.cold_weights_bandwidth);
  EXPECT_DOUBLE_EQ(back.device.memory_efficiency, h.device.memory_efficiency);
  EXPECT_TRUE(back.device.blocking_sends);
  EXPECT_DOUBLE_EQ(back.device.memory_bytes, h.device.memory_bytes);
  EXPECT_DOUBLE_EQ(back.topology.intra.latency_s, h.topology.intra.latency_s);
  EXPECT_DOUBLE_EQ(back.topology.intra.bandwidth, h.topology.intra.bandwidth);
  EXPECT_EQ(back.topology.kind, h.topology.kind);
  EXPECT_EQ(back.topology.host_cores, h.topology.host_cores);
  EXPECT_DOUBLE_EQ(back.topology.effective_cores, 1.73);
  EXPECT_DOUBLE_EQ(back.topology.oversubscribed_cores, 1.61);
  EXPECT_DOUBLE_EQ(back.topology.oversubscribed_send_s, h.topology.oversubscribed_send_s);
  EXPECT_DOUBLE_EQ(back.topology.oversubscribed_recv_s, h.topology.oversubscribed_recv_s);
  EXPECT_DOUBLE_EQ(back.topology.oversubscribed_compute, 0.0625);
  EXPECT_NEAR(back.topology.oversubscribed_action_s, 375e-6, 1e-18);
  EXPECT_DOUBLE_EQ(back.topology.full_host_send_s, h.topology.full_host_send_s);
  EXPECT_DOUBLE_EQ(back.topology.full_host_recv_s, h.topology.full_host_recv_s);
  EXPECT_TRUE(back.topology.run_to_completion);
  EXPECT_DOUBLE_EQ(back.topology.time_slice_s, 2.5e-3);
  EXPECT_DOUBLE_EQ(back.topology.wake_preempt_s, 0.5e-3);
  EXPECT_TRUE(back.topology.core_affinity);
  // Every preset too, and heterogeneous hardware.
  for (const auto& name : pm::preset_names()) {
    const auto p = pm::preset(name);
    const auto q = pm::load_hardware(write(name + ".yaml", pm::hardware_to_yaml(p)));
    EXPECT_EQ(q.device.name, p.device.name) << name;
    EXPECT_DOUBLE_EQ(q.device.peak_flops_half, p.device.peak_flops_half) << name;
    EXPECT_DOUBLE_EQ(q.topology.path(0, 5).latency_s, p.topology.path(0, 5).latency_s) << name;
  }
  const auto mixed = pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/v100-p100-mixed.yaml");
  const auto mixed_back = pm::load_hardware(write("mixed.yaml", pm::hardware_to_yaml(mixed)));
  ASSERT_EQ(mixed_back.devices.size(), mixed.devices.size());
  EXPECT_EQ(mixed_back.describe_devices(4), mixed.describe_devices(4));
}

TEST_F(Kinds, ErrorsNameTheFileLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"preset: cpu\ndevice:\n  kinds:\n    transformer_blok:\n      forward: {max: 0.5}\n",
       ":4: field 'device.kinds.transformer_blok': unknown (valid: embedding, transformer_block"},
      {"preset: cpu\ndevice:\n  kinds:\n    lm_head:\n      forwards: {max: 0.5}\n",
       ":5: field 'device.kinds.lm_head.forwards': unknown (valid: forward, backward, forward_nograd, recompute, per_operator, weight_grad_share)"},
      {"preset: cpu\ndevice:\n  kinds:\n    lm_head:\n      backward: {max: 1.5}\n",
       ":5: field 'device.kinds.lm_head.backward.max': is a share of peak and must be at most 1"},
      {"preset: cpu\ndevice:\n  kinds:\n    lm_head:\n      recompute: {half_flops: -3}\n",
       ":5: field 'device.kinds.lm_head.recompute.half_flops': must not be negative, got -3"},
      {"preset: cpu\ndevice:\n  kinds: [lm_head]\n", ":3: field 'device.kinds': expected a mapping"},
      {"preset: cpu\ndevice:\n  action_overhead_us: {forward: -1}\n",
       ":3: field 'device.action_overhead_us.forward': must not be negative, got -1"},
      {"preset: cpu\ndevice:\n  weight_stream_us_per_mb: {forward: -5}\n",
       ":3: field 'device.weight_stream_us_per_mb.forward': must not be negative, got -5"},
      {"preset: cpu\ndevice:\n  action_overhead_us: {step: 1}\n",
       ":3: field 'device.action_overhead_us.step': unknown (valid: forward, backward, forward_nograd, recompute)"},
      {"preset: cpu\ndevice:\n  step_overhead_us: fast\n", ":3: field 'device.step_overhead_us': expected a number, got 'fast'"},
      {"preset: cpu\ndevice:\n  recv_bandwidth_gbps: 0\n", ":3: field 'device.recv_bandwidth_gbps': must be positive, got 0"},
      {"preset: cpu\ndevice:\n  cold_weights_gbps: -2\n", ":3: field 'device.cold_weights_gbps': must be positive, got -2"},
      {"preset: cpu\ndevice:\n  efficiency: {points: [[1e6, 0.5], [1e6, 0.6]]}\n",
       ":3: field 'device.efficiency.points': the points' works must increase"},
      {"preset: cpu\ndevice:\n  efficiency: {points: [[1e6, 1.5]]}\n",
       ":3: field 'device.efficiency.points': a point's efficiency must be in (0, 1], got 1.5"},
      {"preset: cpu\ndevice:\n  efficiency: {max: 0.5, points: [[1e6, 0.5]]}\n",
       ":3: field 'device.efficiency.points': replaces max and half_flops"},
      {"preset: cpu\ndevice:\n  efficiency: {points: [1e6, 0.5]}\n",
       ":3: field 'device.efficiency.points': expected [work, efficiency] pairs of numbers"},
      {"preset: cpu\ntopology:\n  effective_cores: 0.5\n",
       ":3: field 'topology.effective_cores': must be at least 1 (one rank alone runs at full speed)"},
      {"preset: cpu\ntopology:\n  oversubscribed_cores: 0.9\n",
       ":3: field 'topology.oversubscribed_cores': must be at least 1 (one rank alone runs at full speed)"},
      {"preset: cpu\ntopology:\n  run_to_completion: yes\n",
       ":3: field 'topology.run_to_completion': expected true or false, got 'yes'"},
      {"preset: cpu\ntopology:\n  core_affinity: 1\n",
       ":3: field 'topology.core_affinity': expected true or false, got '1'"},
      {"preset: cpu\ntopology:\n  time_slice_us: -1\n",
       ":3: field 'topology.time_slice_us': must not be negative, got -1"},
      {"preset: cpu\ntopology:\n  wake_preempt_us: -2\n",
       ":3: field 'topology.wake_preempt_us': must not be negative, got -2"},
      {"preset: cpu\ntopology:\n  oversubscribed_recv_us: -2\n",
       ":3: field 'topology.oversubscribed_recv_us': must not be negative, got -2"},
      {"preset: cpu\ntopology:\n  oversubscribed_compute: -0.1\n",
       ":3: field 'topology.oversubscribed_compute': must not be negative, got -0.1"},
      {"preset: cpu\ntopology:\n  oversubscribed_action_us: -5\n",
       ":3: field 'topology.oversubscribed_action_us': must not be negative, got -5"},
      {"preset: cpu\ndevices:\n  - {}\n  - {kinds: {conv: {forward: {max: 0}}}}\n",
       ":4: field 'devices[1].kinds.conv.forward.max': must be positive, got 0"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string e = error_of(text);
    EXPECT_NE(e.find("bad.yaml" + expected), std::string::npos) << text << "\n -> " << e;
  }
}

TEST_F(Kinds, StageCostsUseTheCurvesAndOverheads) {
  const auto h = pm::load_hardware(write("hw.yaml", kCalibrated));
  const pm::Model m = small_transformer();  // embedding, 4 blocks, head
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {2, 4, 1, ps::RecomputePolicy::Full});
  r.microbatch_size = 3;
  const pm::StageCostModel costs(m, h, r);
  const pm::Device& d = h.device;
  const auto block = m.layers[1].cost;
  const auto fp32 = pm::Precision::FP32;
  const double f = block.forward_flops * 3, b = (block.input_grad_flops + block.weight_grad_flops) * 3;
  EXPECT_DOUBLE_EQ(costs.forward_s(1, 3, 0), 30e-6 + 2 * d.layer_seconds("transformer_block", pm::Pass::Forward, f, fp32));
  EXPECT_DOUBLE_EQ(costs.forward_nograd_s(1, 2, 0),
                   30e-6 + d.layer_seconds("transformer_block", pm::Pass::ForwardNoGrad, f, fp32));
  EXPECT_DOUBLE_EQ(costs.recompute_s(1, 2, 0), 35e-6 + d.layer_seconds("transformer_block", pm::Pass::Forward, f, fp32));
  EXPECT_NEAR(costs.backward_s(1, 2, 0), 50e-6 + d.layer_seconds("transformer_block", pm::Pass::Backward, b, fp32), 1e-15);
  // I and W share the backward in proportion to their work, each with the action's overhead.
  EXPECT_NEAR(costs.input_grad_s(1, 2, 0) + costs.weight_grad_s(1, 2, 0), costs.backward_s(1, 2, 0) + 50e-6, 1e-15);
  EXPECT_NEAR((costs.input_grad_s(1, 2, 0) - 50e-6) / (costs.weight_grad_s(1, 2, 0) - 50e-6),
              block.input_grad_flops / block.weight_grad_flops, 1e-9);
  EXPECT_DOUBLE_EQ(costs.forward_s(2, 2, 0), 0);  // no layers, no action
  // With recompute, F runs without autograd and R with it.
  ps::Program p = ps::build_schedule("1f1b", {2, 4, 1, ps::RecomputePolicy::Full});
  p.partition = {{0, 3}, {3, 6}};
  const auto table = pm::stage_table(costs, h, p);
  EXPECT_DOUBLE_EQ(table[0].forward_s, costs.forward_nograd_s(0, 3, 0));
  EXPECT_DOUBLE_EQ(table[0].recompute_s, costs.recompute_s(0, 3, 0));
  EXPECT_DOUBLE_EQ(table[1].backward_s, costs.backward_s(3, 6, 1));
  // Receives: the receiver's cost of taking the bytes of the cut they cross.
  EXPECT_DOUBLE_EQ(table[1].activation_recv_s, d.recv_seconds(costs.cut_bytes(3)));
  EXPECT_DOUBLE_EQ(table[0].gradient_recv_s, d.recv_seconds(costs.cut_bytes(3)));
  EXPECT_DOUBLE_EQ(table[0].activation_recv_s, 0);
  // Sends: the sender's overhead and its cost per byte of the cut.
  EXPECT_DOUBLE_EQ(table[0].send_s(ps::Op::SEND_F), d.transfer_overhead_s + costs.cut_bytes(3) / 0.5e9);
  // More ranks than the shared host's cores: each transfer also waits for a
  // core, and each forward, backward and recompute takes the recorded share
  // longer; the optimizer step does not.
  pm::Hardware crowded = h;
  crowded.topology.oversubscribed_send_s = 1e-3;
  crowded.topology.oversubscribed_recv_s = 2e-3;
  crowded.topology.oversubscribed_compute = 0.25;
  EXPECT_EQ(pm::stage_table(costs, crowded, p)[0].send_overhead_s, table[0].send_overhead_s);  // 2 ranks, 2 cores
  // As many ranks as cores: each transfer waits for a core on average by the
  // full host's waits (2 ranks on 2 cores), not by the crowded host's.
  pm::Hardware full = h;
  full.topology.full_host_send_s = 0.4e-3;
  full.topology.full_host_recv_s = 0.6e-3;
  crowded.topology.full_host_send_s = 0.4e-3;
  ASSERT_EQ(full.topology.host_cores, 2);
  const auto ft = pm::stage_table(costs, full, p);
  EXPECT_DOUBLE_EQ(ft[0].send_overhead_s, table[0].send_overhead_s + 0.4e-3);
  EXPECT_DOUBLE_EQ(ft[1].activation_recv_s, table[1].activation_recv_s + 0.6e-3);
  EXPECT_DOUBLE_EQ(ft[0].gradient_recv_s, table[0].gradient_recv_s + 0.6e-3);
  EXPECT_DOUBLE_EQ(ft[0].activation_recv_s, 0);
  EXPECT_DOUBLE_EQ(ft[1].backward_s, table[1].backward_s);
  EXPECT_EQ(pm::stage_table(costs, crowded, p)[1].backward_s, table[1].backward_s);
  pm::PartitionRequest r4 = r;
  r4.program = ps::build_schedule("gpipe", {4, 4, 1, ps::RecomputePolicy::Full});
  ps::Program p4 = ps::build_schedule("1f1b", {4, 4, 1, ps::RecomputePolicy::Full});
  p4.partition = {{0, 2}, {2, 3}, {3, 4}, {4, 6}};
  const pm::StageCostModel costs4(m, crowded, r4);
  const auto t4 = pm::stage_table(costs4, crowded, p4);
  EXPECT_DOUBLE_EQ(t4[1].send_overhead_s, d.transfer_overhead_s + 1e-3);
  EXPECT_DOUBLE_EQ(t4[1].activation_recv_s, d.recv_seconds(costs4.cut_bytes(2)) + 2e-3);
  EXPECT_DOUBLE_EQ(t4[0].activation_recv_s, 0);
  EXPECT_DOUBLE_EQ(t4[1].forward_s, 1.25 * costs4.scheduled_forward_s(2, 3, 1));
  EXPECT_DOUBLE_EQ(t4[3].backward_s, 1.25 * costs4.backward_s(4, 6, 3));
  EXPECT_DOUBLE_EQ(t4[0].recompute_s, 1.25 * costs4.recompute_s(0, 2, 0));
  EXPECT_DOUBLE_EQ(t4[3].step_s, costs4.step_s(4, 6, 3));
  EXPECT_DOUBLE_EQ(t4[2].step_s, costs4.step_s(3, 4, 2));
  // And a time per action on top of the share, whatever its work (not the step).
  pm::Hardware per_action = crowded;
  per_action.topology.oversubscribed_action_s = 0.5e-3;
  const auto pa = pm::stage_table(pm::StageCostModel(m, per_action, r4), per_action, p4);
  EXPECT_DOUBLE_EQ(pa[1].forward_s, t4[1].forward_s + 0.5e-3);
  EXPECT_DOUBLE_EQ(pa[3].backward_s, t4[3].backward_s + 0.5e-3);
  EXPECT_DOUBLE_EQ(pa[0].recompute_s, t4[0].recompute_s + 0.5e-3);
  EXPECT_DOUBLE_EQ(pa[3].step_s, t4[3].step_s);
  EXPECT_DOUBLE_EQ(pm::stage_table(costs, per_action, p)[1].backward_s, table[1].backward_s);  // 2 ranks, 2 cores
  // A transfer's wait for a core is no longer than the first of the cores'
  // compute bursts takes to end, b / (C + 1), b the stages' mean of (F + B) / 2.
  double burst = 0;
  for (const auto& t : t4) burst += (t.forward_s + t.backward_s) / 2;
  const double bound = burst / 4 / 3;
  ASSERT_GT(bound, 2e-3);  // the waits above are under it: kept as fitted
  pm::Hardware long_waits = crowded;
  long_waits.topology.oversubscribed_send_s = 2 * bound;
  long_waits.topology.oversubscribed_recv_s = 0.5 * bound;
  const auto lw = pm::stage_table(costs4, long_waits, p4);
  EXPECT_NEAR(lw[1].send_overhead_s, d.transfer_overhead_s + bound, 1e-12);
  EXPECT_NEAR(lw[1].activation_recv_s, d.recv_seconds(costs4.cut_bytes(2)) + 0.5 * bound, 1e-12);
  EXPECT_NEAR(lw[2].recv_wake_s, 0.5 * bound, 1e-12);
  // A stage's first forward in a step reads its weights at the device's
  // cold_weights_bandwidth: micro-batch 0's F only, on top of the others'.
  EXPECT_DOUBLE_EQ(table[0].first_forward_extra_s, 0);  // the file has none
  pm::Hardware cold = h;
  cold.device.cold_weights_bandwidth = 4e9;
  const pm::StageCostModel cold_costs(m, cold, r);
  const auto ct = pm::stage_table(cold_costs, cold, p);
  const double bytes = 4.0 * static_cast<double>(cold_costs.params(3, 6));
  EXPECT_GT(bytes, 0);
  EXPECT_DOUBLE_EQ(ct[1].first_forward_extra_s, bytes / 4e9);
  EXPECT_DOUBLE_EQ(ct[1].of(ps::make_action(ps::Op::F, 1, 0)), ct[1].forward_s + bytes / 4e9);
  EXPECT_DOUBLE_EQ(ct[1].of(ps::make_action(ps::Op::F, 1, 1)), ct[1].forward_s);
  EXPECT_DOUBLE_EQ(ct[1].of(ps::make_action(ps::Op::B, 1, 0)), ct[1].backward_s);
  // The step: its own overhead plus the traffic over the memory bandwidth.
  pm::Hardware unit = h;
  unit.device.memory_bandwidth = 1;
  unit.device.step_overhead_s = 0;
  const double traffic = pm::StageCostModel(m, unit, r).step_s(0, 3, 0);
  EXPECT_DOUBLE_EQ(costs.step_s(0, 3, 0), 120e-6 + traffic / d.memory_bandwidth);
}

TEST_F(Kinds, TheDefaultKindTimesTheKindsThatHaveNoCurves) {
  const auto h = pm::load_hardware(write("calibrated.yaml", kCalibrated));
  const std::string text =
      "preset: cpu\n"
      "device:\n"
      "  kinds:\n"
      "    transformer_block:\n"
      "      forward: {max: 0.4, half_flops: 2e6}\n"
      "    default:\n"
      "      forward: {max: 0.25, half_flops: 1e6}\n"
      "      backward: {max: 0.2, half_flops: 3e6}\n";
  const pm::Device d = pm::load_hardware(write("with_default.yaml", text)).device;
  const double peak = d.peak_flops(pm::Precision::FP32);
  const double op = d.op_overhead_s;  // the preset's, per layer
  // A kind with curves keeps them; any other takes `default`'s.
  EXPECT_NEAR(d.layer_seconds("transformer_block", pm::Pass::Forward, 4e6, pm::Precision::FP32),
              op + 4e6 / (peak * 0.4 * 4e6 / (4e6 + 2e6)), 1e-15);
  EXPECT_NEAR(d.layer_seconds("linear", pm::Pass::Forward, 4e6, pm::Precision::FP32),
              op + 4e6 / (peak * 0.25 * 4e6 / (4e6 + 1e6)), 1e-15);
  EXPECT_NEAR(d.layer_seconds("conv", pm::Pass::Backward, 4e6, pm::Precision::FP32),
              op + 4e6 / (peak * 0.2 * 4e6 / (4e6 + 3e6)), 1e-15);
  EXPECT_TRUE(d.has_kind("residual_block"));
  // Without `default`, such a kind is on the device's curve, as before.
  EXPECT_FALSE(h.device.has_kind("linear"));
  EXPECT_NEAR(h.device.layer_seconds("linear", pm::Pass::Forward, 4e6, pm::Precision::FP32),
              h.device.compute_seconds(4e6, pm::Precision::FP32), 1e-15);
  // Written and read back, the same device.
  const std::string again = write("again.yaml", pm::hardware_to_yaml(pm::load_hardware(write("w.yaml", text)), "test"));
  EXPECT_EQ(pm::load_hardware(again).device, d);
  // Unknown kinds are still refused, naming the field.
  EXPECT_NE(error_of("preset: cpu\ndevice:\n  kinds:\n    defaults:\n      forward: {max: 0.5}\n").find("defaults"),
            std::string::npos);
}

TEST_F(Kinds, APerOperatorCurveScalesItsFixedCostWithTheLayersOperators) {
  const std::string text =
      "preset: cpu\n"
      "device:\n"
      "  kinds:\n"
      "    default:\n"
      "      forward: {max: 0.25, half_flops: 1e6}\n"
      "      backward: {max: 0.2, half_flops: 3e6}\n"
      "      per_operator: true\n";
  const pm::Device d = pm::load_hardware(write("per_operator.yaml", text)).device;
  ASSERT_TRUE(d.kinds.at("default").per_operator);
  const double peak = d.peak_flops(pm::Precision::FP32), op = d.op_overhead_s;
  // t = w / (max peak) + operators x half / (max peak).
  for (const int ops : {1, 2, 14}) {
    EXPECT_NEAR(d.layer_seconds("linear", pm::Pass::Forward, 4e6, pm::Precision::FP32, ops),
                op + (4e6 + ops * 1e6) / (peak * 0.25), 1e-15) << ops;
    EXPECT_NEAR(d.layer_seconds("conv", pm::Pass::Backward, 4e6, pm::Precision::FP32, ops),
                op + (4e6 + ops * 3e6) / (peak * 0.2), 1e-15) << ops;
  }
  // Written and read back, the same device; not a boolean: refused, named.
  const std::string again = write("again.yaml", pm::hardware_to_yaml(pm::load_hardware(write("w.yaml", text)), "test"));
  EXPECT_EQ(pm::load_hardware(again).device, d);
  EXPECT_NE(error_of("preset: cpu\ndevice:\n  kinds:\n    default:\n      per_operator: 3\n").find("per_operator"),
            std::string::npos);
}

TEST_F(Kinds, OperatorsCountWhatTheExecutorRunsInAForward) {
  const auto model = [](const std::string& name) { return pm::load_model(std::string(PIPETWIN_EXAMPLES_DIR) + "/" + name); };
  // mlp-small: the first linear alone, the hidden ones after a ReLU, the last with its loss.
  const pm::Model mlp = model("mlp-small.yaml");
  EXPECT_EQ(pm::operators(mlp, 0), 1);
  EXPECT_EQ(pm::operators(mlp, 1), 2);
  EXPECT_EQ(pm::operators(mlp, static_cast<int>(mlp.layers.size()) - 1), 4);
  // resnet-small: a residual block with a projected skip runs two more.
  const pm::Model resnet = model("resnet-small.yaml");
  std::set<int> blocks;
  for (int l = 0; l < static_cast<int>(resnet.layers.size()); ++l) {
    if (resnet.layers[l].kind == pm::LayerKind::ResidualBlock) blocks.insert(pm::operators(resnet, l));
  }
  EXPECT_EQ(blocks, (std::set<int>{7, 9}));
  const pm::Model t = model("transformer-small.yaml");
  EXPECT_EQ(pm::operators(t, 1), 14);
}

TEST_F(Kinds, AMicroBatchTooSmallToReuseItsWeightsTakesTheTimeToReadThem) {
  // mlp-small's hidden linear layers (512 x 512) on a device of 1 GB/s: a
  // micro-batch of 1 cannot hide reading 1 MB of weights behind its FLOPs.
  const pm::Model mlp = pm::load_model(std::string(PIPETWIN_EXAMPLES_DIR) + "/mlp-small.yaml");
  pm::Hardware h = pm::preset("cpu");
  h.device.memory_bandwidth = 1e9;
  h.device.memory_efficiency = 0.5;
  const auto costs_at = [&](int b) {
    pm::PartitionRequest r;
    r.program = ps::build_schedule("gpipe", {1, 1, 1, ps::RecomputePolicy::None});
    r.microbatch_size = b;
    return pm::StageCostModel(mlp, h, r);
  };
  const auto& c = mlp.layers[1].cost;
  const double read = static_cast<double>(c.params) * 4 / (1e9 * 0.5);
  EXPECT_DOUBLE_EQ(h.device.weight_seconds(static_cast<double>(c.params) * 4), read);
  const auto fp32 = pm::Precision::FP32;
  // Below the floor at one sample: the forward and the input gradient read
  // the weights once, the weight gradient reads and writes their gradients.
  ASSERT_LT(h.device.compute_seconds(c.forward_flops, fp32), read);
  // (The ReLU's elementwise traffic comes on top, as before.)
  const auto traffic = [&](double bytes, int b) { return bytes * b / (1e9 * 0.5); };
  const auto one = costs_at(1);
  EXPECT_DOUBLE_EQ(one.forward_s(1, 2, 0), read + traffic(c.forward_traffic, 1));
  EXPECT_DOUBLE_EQ(one.forward_nograd_s(1, 2, 0), read + traffic(c.forward_traffic, 1));
  EXPECT_DOUBLE_EQ(one.recompute_s(1, 2, 0), read + traffic(c.forward_traffic, 1));
  EXPECT_DOUBLE_EQ(one.input_grad_s(1, 2, 0), read + traffic(c.backward_traffic, 1));
  EXPECT_DOUBLE_EQ(one.weight_grad_s(1, 2, 0), 2 * read);
  // Enough samples and the FLOPs take longer than the weights: the curve.
  const int many = 4096;
  const auto big = costs_at(many);
  ASSERT_GT(h.device.compute_seconds(c.weight_grad_flops * many, fp32), 2 * read);
  EXPECT_DOUBLE_EQ(big.forward_s(1, 2, 0),
                   h.device.compute_seconds(c.forward_flops * many, fp32) + traffic(c.forward_traffic, many));
  EXPECT_DOUBLE_EQ(big.weight_grad_s(1, 2, 0), h.device.compute_seconds(c.weight_grad_flops * many, fp32));
  // A calibrated kind's curve has the same floor.
  pm::Hardware calibrated = h;
  calibrated.device.kinds["linear"] = pm::KindEfficiency{{1.0, 0, {}}, {1.0, 0, {}}, {}, {}, false, {}};
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {1, 1, 1, ps::RecomputePolicy::None});
  r.microbatch_size = 1;
  const pm::StageCostModel fitted(mlp, calibrated, r);
  EXPECT_DOUBLE_EQ(fitted.forward_s(1, 2, 0), read);
  EXPECT_DOUBLE_EQ(fitted.backward_s(1, 2, 0), 3 * read);
  // Without a bandwidth, no floor.
  h.device.memory_bandwidth = 0;
  EXPECT_DOUBLE_EQ(costs_at(1).weight_grad_s(1, 2, 0), h.device.compute_seconds(c.weight_grad_flops, fp32));
  // An embedding gathers rows, not its table: no floor on its forward.
  const pm::Model t = small_transformer();
  pm::Hardware slow = pm::preset("cpu");
  slow.device.memory_bandwidth = 1e3;
  pm::PartitionRequest rt;
  rt.program = ps::build_schedule("gpipe", {1, 1, 1, ps::RecomputePolicy::None});
  rt.microbatch_size = 1;
  ASSERT_EQ(t.layers[0].kind, pm::LayerKind::Embedding);
  EXPECT_LT(pm::StageCostModel(t, slow, rt).forward_s(0, 1, 0), 1.0);
  EXPECT_GT(pm::StageCostModel(t, slow, rt).forward_s(1, 2, 0), 1.0);
}

TEST_F(Kinds, ACalibratedKindsLayersStreamTheirWeightsInEachPass) {
  // weight_stream_us_per_mb: 100 us a MB forward (10 GB/s), 250 backward.
  const auto h = pm::load_hardware(write("hw.yaml", std::string(kCalibrated) + ""));
  pm::Hardware streamed = pm::load_hardware(write(
      "streamed.yaml", std::string("preset: cpu\ndevice:\n  weight_stream_us_per_mb: {forward: 100, backward: 250}\n") +
                           std::string(kCalibrated).substr(std::string(kCalibrated).find("  op_overhead_us"))));
  ASSERT_DOUBLE_EQ(streamed.device.weight_stream.of(pm::Pass::Forward), 100e-12);
  const pm::Model m = small_transformer();
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {2, 4, 1, ps::RecomputePolicy::Full});
  r.microbatch_size = 3;
  const pm::StageCostModel plain(m, h, r), with(m, streamed, r);
  const double block = static_cast<double>(m.layers[1].cost.params) * 4, head = static_cast<double>(m.layers[5].cost.params) * 4;
  EXPECT_EQ(pm::pass_weight_bytes(m, 1), block);
  EXPECT_NEAR(with.forward_s(1, 3, 0) - plain.forward_s(1, 3, 0), 2 * block * 100e-12, 1e-15);
  EXPECT_NEAR(with.recompute_s(1, 3, 0) - plain.recompute_s(1, 3, 0), 2 * block * 100e-12, 1e-15);
  EXPECT_NEAR(with.backward_s(1, 6, 0) - plain.backward_s(1, 6, 0), (4 * block + head) * 250e-12, 1e-15);
  // An embedding gathers rows of its table: it streams none.
  EXPECT_EQ(pm::pass_weight_bytes(m, 0), 0);
  EXPECT_DOUBLE_EQ(with.forward_s(0, 1, 0), plain.forward_s(0, 1, 0));
  // A kind the file has no curve of keeps the device's curve and the weights' floor alone.
  const pm::Model mlp = pm::load_model(std::string(PIPETWIN_EXAMPLES_DIR) + "/mlp-small.yaml");
  EXPECT_DOUBLE_EQ(pm::StageCostModel(mlp, streamed, r).forward_s(0, 2, 0), pm::StageCostModel(mlp, h, r).forward_s(0, 2, 0));
}

TEST_F(Kinds, PresetsWithoutKindsCostAsBefore) {
  // No kinds: every layer on the device curve with the per-op overhead,
  // F = R, and I and W each an operation, as before calibration existed.
  const auto h = pm::preset("a100");
  const pm::Model m = small_transformer();
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {1, 1, 1, ps::RecomputePolicy::Full});
  r.microbatch_size = 2;
  const pm::StageCostModel costs(m, h, r);
  double f = 0, in = 0, w = 0;
  for (const auto& l : m.layers) {
    f += h.device.compute_seconds(l.cost.forward_flops * 2, m.precision);
    in += h.device.compute_seconds(l.cost.input_grad_flops * 2, m.precision);
    w += h.device.compute_seconds(l.cost.weight_grad_flops * 2, m.precision);
  }
  EXPECT_NEAR(costs.forward_s(0, 6, 0), f, 1e-15);
  EXPECT_NEAR(costs.forward_nograd_s(0, 6, 0), f, 1e-15);
  EXPECT_NEAR(costs.recompute_s(0, 6, 0), f, 1e-15);
  EXPECT_NEAR(costs.backward_s(0, 6, 0), in + w, 1e-15);
  EXPECT_NEAR(costs.compute_s(0, 6, 0), 2 * f + in + w, 1e-15);
}
