// The YAML hardware spec read: a file's device, devices, topology and
// calibration fields over its preset's (hardware_writer.cpp writes them).
#include <cmath>
#include <filesystem>
#include <functional>

#include "models/hardware.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {

namespace {

constexpr double kGB = 1e9, kUs = 1e-6;

Link link_from_yaml(const YamlFields& y) {
  y.reject_unknown({"latency_us", "bandwidth_gbps"});
  return {y.non_negative_number("latency_us") * kUs, y.positive_number("bandwidth_gbps") * kGB};
}

// A share of something the file also gives: in (0, 1].
double share_field(const YamlFields& y, const std::string& key, const std::string& of) {
  const double v = y.positive_number(key);
  if (v > 1) y.fail(key, "is a share of " + of + " and must be at most 1");
  return v;
}

Efficiency efficiency_from_yaml(const YamlFields& e, Efficiency curve = {}) {
  e.reject_unknown({"max", "half_flops", "points"});
  if (e.has("points")) {
    if (e.has("max") || e.has("half_flops")) e.fail("points", "replaces max and half_flops: give one or the other");
    const YAML::Node list = e.node()["points"];
    const auto bad = [&](const std::string& why) { e.fail("points", why); };
    if (!list.IsSequence() || list.size() == 0) bad("expected a list of [work, efficiency] pairs");
    if (list.size() > 10'000) bad("holds more than 10000 points");
    curve = {};
    for (const auto& p : list) {
      double w = 0, eff = 0;
      if (!p.IsSequence() || p.size() != 2 || !YAML::convert<double>::decode(p[0], w) ||
          !YAML::convert<double>::decode(p[1], eff)) {
        bad("expected [work, efficiency] pairs of numbers");
      }
      if (!(w > 0) || !std::isfinite(w)) bad("a point's work must be positive");
      if (!(eff > 0) || eff > 1) bad("a point's efficiency must be in (0, 1], got " + p[1].Scalar());
      if (!curve.points.empty() && w <= curve.points.back().first) bad("the points' works must increase");
      curve.points.emplace_back(w, eff);
    }
    return curve;
  }
  if (e.has("max") || e.has("half_flops")) curve.points.clear();
  if (e.has("max")) curve.max = share_field(e, "max", "peak");
  if (e.has("half_flops")) curve.half_flops = e.non_negative_number("half_flops");
  return curve;
}

// A fused attention kernel's rates: `forward`, `forward_causal` and
// `backward` (and optionally `backward_causal`), each a list of [sequence
// length, TFLOP/s] pairs at increasing lengths.
AttentionRates attention_from_yaml(const YamlFields& a) {
  a.reject_unknown({"source", "forward", "forward_causal", "backward", "backward_causal"});
  if (a.has("source")) a.text("source");  // where the rates were read, for the reader
  const auto curve = [&](const std::string& key) {
    AttentionRates::Curve out;
    const YAML::Node list = a.node()[key];
    const auto bad = [&](const std::string& why) { a.fail(key, why); };
    if (!list.IsSequence() || list.size() == 0) bad("expected a list of [sequence length, TFLOP/s] pairs");
    if (list.size() > 1000) bad("holds more than 1000 points");
    for (const auto& p : list) {
      double seq = 0, tflops = 0;
      if (!p.IsSequence() || p.size() != 2 || !YAML::convert<double>::decode(p[0], seq) ||
          !YAML::convert<double>::decode(p[1], tflops)) {
        bad("expected [sequence length, TFLOP/s] pairs of numbers");
      }
      if (!(seq >= 1) || !std::isfinite(seq)) bad("a point's sequence length must be at least 1");
      if (!(tflops > 0) || !std::isfinite(tflops)) bad("a point's TFLOP/s must be positive");
      if (!out.empty() && seq <= out.back().first) bad("the points' sequence lengths must increase");
      out.emplace_back(seq, tflops * 1e12);
    }
    return out;
  };
  for (const char* key : {"forward", "forward_causal", "backward"}) {
    if (!a.has(key)) a.fail(key, "missing (the kernel's rates need forward, forward_causal and backward)");
  }
  AttentionRates r;
  r.forward = curve("forward");
  r.forward_causal = curve("forward_causal");
  r.backward = curve("backward");
  if (a.has("backward_causal")) r.backward_causal = curve("backward_causal");
  return r;
}

const std::vector<std::string>& layer_kind_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto k : {LayerKind::Embedding, LayerKind::TransformerBlock, LayerKind::LmHead, LayerKind::Linear,
                         LayerKind::Conv, LayerKind::SepConv, LayerKind::Pool, LayerKind::Add, LayerKind::Concat,
                         LayerKind::ResidualBlock, LayerKind::ClassifierHead, LayerKind::LlmEmbedding,
                         LayerKind::DecoderBlock, LayerKind::LlmHead, LayerKind::MoeBlock}) {
      out.emplace_back(kind_name(k));
    }
    return out;
  }();
  return names;
}

// kinds: {transformer_block: {forward: {max, half_flops}, backward: {...}, forward_nograd: ..., recompute: ...}}
void apply_kinds(Device& d, const YamlFields& y) {
  const YAML::Node list = y.node()["kinds"];
  if (!list.IsMap()) y.fail("kinds", "expected a mapping from layer kind to its curves");
  const YamlFields kinds = y.child("kinds");
  std::vector<std::string> known = layer_kind_names();
  known.emplace_back(kDefaultKind);
  kinds.reject_unknown(known);
  for (const auto& entry : list) {
    const std::string kind = entry.first.Scalar();
    const YamlFields k = kinds.child(kind);
    k.reject_unknown({"forward", "backward", "forward_nograd", "recompute", "per_operator", "weight_grad_share"});
    auto it = d.kinds.find(kind);
    if (it == d.kinds.end()) {
      // A new kind starts from the device's curve in every pass it does not give.
      it = d.kinds.emplace(kind, KindEfficiency{d.efficiency, d.efficiency, {}, {}}).first;
    }
    KindEfficiency& c = it->second;
    if (k.has("forward")) c.forward = efficiency_from_yaml(k.child("forward"), c.forward);
    if (k.has("backward")) c.backward = efficiency_from_yaml(k.child("backward"), c.backward);
    if (k.has("forward_nograd")) c.forward_nograd = efficiency_from_yaml(k.child("forward_nograd"), c.of(Pass::ForwardNoGrad));
    if (k.has("recompute")) c.recompute = efficiency_from_yaml(k.child("recompute"), c.of(Pass::Recompute));
    c.per_operator = k.boolean_or("per_operator", c.per_operator);
    if (k.has("weight_grad_share")) {
      const double share = k.non_negative_number("weight_grad_share");
      if (share >= 1) k.fail("weight_grad_share", "is W's share of the backward and must be below 1");
      c.weight_grad_share = share;
    }
  }
}

// Per pass, each value times `unit` (microseconds, or microseconds per MB).
void apply_action_overheads(ActionOverheads& a, const YamlFields& y, double unit = kUs) {
  y.reject_unknown({"forward", "backward", "forward_nograd", "recompute"});
  if (y.has("forward")) a.forward_s = y.non_negative_number("forward") * unit;
  if (y.has("backward")) a.backward_s = y.non_negative_number("backward") * unit;
  if (y.has("forward_nograd")) a.forward_nograd_s = y.non_negative_number("forward_nograd") * unit;
  if (y.has("recompute")) a.recompute_s = y.non_negative_number("recompute") * unit;
}

void apply_device(Device& d, const YamlFields& y, bool preset_allowed = false) {
  std::vector<std::string> known{"name",           "peak_flops_fp32",      "peak_flops_half",    "peak_flops_fp8", "memory_gb",
                                 "memory_bandwidth_gbps", "efficiency",    "op_overhead_us",     "transfer_overhead_us",
                                 "kinds",          "action_overhead_us",   "step_overhead_us",   "recv_overhead_us",
                                 "recv_bandwidth_gbps",   "send_bandwidth_gbps", "cold_weights_gbps",
                                 "memory_efficiency",     "blocking_sends",      "overlap_factor",
                                 "weight_stream_us_per_mb", "memory_reserve_gb",   "memory_reserve_fraction", "attention"};
  if (preset_allowed) known.push_back("preset");
  y.reject_unknown(known);
  if (y.has("name")) d.name = y.line("name");
  if (y.has("peak_flops_fp32")) d.peak_flops_fp32 = y.positive_number("peak_flops_fp32");
  if (y.has("peak_flops_half")) d.peak_flops_half = y.positive_number("peak_flops_half");
  if (y.has("peak_flops_fp8")) d.peak_flops_fp8 = y.positive_number("peak_flops_fp8");
  if (d.peak_flops_fp8 > 0 && d.peak_flops_fp8 < d.peak_flops_half) {
    y.fail(y.has("peak_flops_fp8") ? "peak_flops_fp8" : "peak_flops_half", "FP8's rate must be at least BF16's (peak_flops_half)");
  }
  if (y.has("memory_gb")) d.memory_bytes = y.positive_number("memory_gb") * kGB;
  if (y.has("memory_reserve_gb")) d.memory_reserve_bytes = y.non_negative_number("memory_reserve_gb") * kGB;
  if (y.has("memory_reserve_fraction")) {
    d.memory_reserve_fraction = y.non_negative_number("memory_reserve_fraction");
    if (d.memory_reserve_fraction >= 1) y.fail("memory_reserve_fraction", "is a share of the tensors' memory and must be below 1");
  }
  if (y.has("memory_bandwidth_gbps")) d.memory_bandwidth = y.positive_number("memory_bandwidth_gbps") * kGB;
  if (y.has("blocking_sends")) d.blocking_sends = y.boolean_or("blocking_sends", false);
  if (y.has("overlap_factor")) {
    d.overlap_factor = y.non_negative_number("overlap_factor");
    if (d.overlap_factor > 1) y.fail("overlap_factor", "is the share of the shorter action hidden and must be at most 1");
  }
  if (y.has("memory_efficiency")) d.memory_efficiency = share_field(y, "memory_efficiency", "memory_bandwidth_gbps");
  if (y.has("op_overhead_us")) d.op_overhead_s = y.non_negative_number("op_overhead_us") * kUs;
  if (y.has("transfer_overhead_us")) d.transfer_overhead_s = y.non_negative_number("transfer_overhead_us") * kUs;
  if (y.has("efficiency")) d.efficiency = efficiency_from_yaml(y.child("efficiency"), d.efficiency);
  if (y.has("kinds")) apply_kinds(d, y);
  if (y.has("attention")) d.attention = attention_from_yaml(y.child("attention"));
  if (y.has("action_overhead_us")) apply_action_overheads(d.action_overhead, y.child("action_overhead_us"));
  if (y.has("weight_stream_us_per_mb")) {
    apply_action_overheads(d.weight_stream, y.child("weight_stream_us_per_mb"), kUs / 1e6);
  }
  if (y.has("step_overhead_us")) d.step_overhead_s = y.non_negative_number("step_overhead_us") * kUs;
  if (y.has("recv_overhead_us")) d.recv_overhead_s = y.non_negative_number("recv_overhead_us") * kUs;
  if (y.has("recv_bandwidth_gbps")) d.recv_bandwidth = y.positive_number("recv_bandwidth_gbps") * kGB;
  if (y.has("send_bandwidth_gbps")) d.send_bandwidth = y.positive_number("send_bandwidth_gbps") * kGB;
  if (y.has("cold_weights_gbps")) d.cold_weights_bandwidth = y.positive_number("cold_weights_gbps") * kGB;
}

void apply_topology(Topology& t, const YamlFields& y) {
  y.reject_unknown(
      {"kind", "devices_per_host", "devices_per_switch", "host_cores", "effective_cores", "oversubscribed_cores", "oversubscribed_send_us",
       "oversubscribed_recv_us", "full_host_send_us", "full_host_recv_us", "oversubscribed_compute", "oversubscribed_action_us", "run_to_completion", "time_slice_us", "wake_preempt_us", "core_affinity", "intra", "bridge", "inter", "collective",
       "tensor_collective", "all_to_all", "tensor_compute",       "nics_per_host", "network", "nodes_per_leaf", "oversubscription"});
  if (y.has("kind")) {
    const std::string k = y.text("kind");
    if (k == "all-to-all") t.kind = TopologyKind::AllToAll;
    else if (k == "pcie-tree") t.kind = TopologyKind::PcieTree;
    else if (k == "multi-host") t.kind = TopologyKind::MultiHost;
    else if (k == "shared-host") t.kind = TopologyKind::SharedHost;
    else if (k == "cluster") t.kind = TopologyKind::Cluster;
    else y.fail("kind", "unknown topology '" + k + "' (valid: all-to-all, pcie-tree, multi-host, shared-host, cluster)");
  }
  if (y.has("devices_per_host")) t.devices_per_host = static_cast<int>(y.positive_int("devices_per_host"));
  if (y.has("nics_per_host")) t.nics_per_host = static_cast<int>(y.positive_int("nics_per_host"));
  if (t.devices_per_host % t.nics_per_host != 0) {  // the file's field, or the one it changed of its preset's pair
    const std::string pair = std::to_string(t.nics_per_host) + " NICs for " + std::to_string(t.devices_per_host) +
                             " GPUs per node: nics_per_host must divide devices_per_host (GPUs share NICs evenly)";
    y.fail(y.has("nics_per_host") ? "nics_per_host" : "devices_per_host", pair);
  }
  if (y.has("network")) {
    const std::string n = y.text("network");
    if (n == "fat-tree") t.network = Network::FatTree;
    else if (n == "rail") t.network = Network::Rail;
    else y.fail("network", "unknown network '" + n + "' (valid: fat-tree, rail)");
  }
  if (y.has("nodes_per_leaf")) t.nodes_per_leaf = static_cast<int>(y.positive_int("nodes_per_leaf"));
  if (y.has("oversubscription")) {
    t.oversubscription = y.positive_number("oversubscription");
    if (t.oversubscription < 1) {
      y.fail("oversubscription", "is " + yaml_number(t.oversubscription) +
                                     ": must be at least 1 (1: full bisection, 2: uplinks of half the NICs' bandwidth)");
    }
  }
  if (y.has("devices_per_switch")) t.devices_per_switch = static_cast<int>(y.positive_int("devices_per_switch"));
  if (y.has("host_cores")) t.host_cores = static_cast<int>(y.positive_int("host_cores"));
  // A cores' worth of compute: at least one (a rank alone runs at full speed), at most the host's cores.
  const auto cores_field = [&](const char* name, double& out) {
    if (!y.has(name)) return;
    out = y.positive_number(name);
    if (out < 1) y.fail(name, "must be at least 1 (one rank alone runs at full speed)");
    if (out > t.host_cores + 1e-9) {
      y.fail(name, "is " + yaml_number(out) + ", more than the host's " + std::to_string(t.host_cores) +
                       " cores (host_cores)");
    }
  };
  cores_field("effective_cores", t.effective_cores);
  cores_field("oversubscribed_cores", t.oversubscribed_cores);
  if (y.has("oversubscribed_send_us")) t.oversubscribed_send_s = y.non_negative_number("oversubscribed_send_us") * kUs;
  if (y.has("oversubscribed_recv_us")) t.oversubscribed_recv_s = y.non_negative_number("oversubscribed_recv_us") * kUs;
  if (y.has("full_host_send_us")) t.full_host_send_s = y.non_negative_number("full_host_send_us") * kUs;
  if (y.has("full_host_recv_us")) t.full_host_recv_s = y.non_negative_number("full_host_recv_us") * kUs;
  if (y.has("oversubscribed_compute")) t.oversubscribed_compute = y.non_negative_number("oversubscribed_compute");
  if (y.has("oversubscribed_action_us")) t.oversubscribed_action_s = y.non_negative_number("oversubscribed_action_us") * kUs;
  if (y.has("run_to_completion")) {
    const std::string v = y.text("run_to_completion");
    if (v != "true" && v != "false") y.fail("run_to_completion", "expected true or false, got '" + v + "'");
    t.run_to_completion = v == "true";
  }
  if (y.has("core_affinity")) {
    const std::string v = y.text("core_affinity");
    if (v != "true" && v != "false") y.fail("core_affinity", "expected true or false, got '" + v + "'");
    t.core_affinity = v == "true";
  }
  if (y.has("time_slice_us")) t.time_slice_s = y.non_negative_number("time_slice_us") * kUs;
  if (y.has("wake_preempt_us")) t.wake_preempt_s = y.non_negative_number("wake_preempt_us") * kUs;
  if (y.has("intra")) t.intra = link_from_yaml(y.child("intra"));
  if (y.has("bridge")) t.bridge = link_from_yaml(y.child("bridge"));
  if (y.has("inter")) t.inter = link_from_yaml(y.child("inter"));
  if (y.has("collective")) t.collective = link_from_yaml(y.child("collective"));
  if (y.has("tensor_collective")) t.tensor_collective = link_from_yaml(y.child("tensor_collective"));
  if (y.has("all_to_all")) t.exchange = link_from_yaml(y.child("all_to_all"));
  if (y.has("tensor_compute")) t.tensor_compute = y.non_negative_number("tensor_compute");
}

// A field that neither the file nor its preset gives: the error names the
// line of the mapping that should hold it (the file's first line when that
// mapping is absent too).
const char* kMissing = "missing (give it, or start from a preset with 'preset:')";

void check_device(const Device& d, const std::function<void(const std::string&)>& missing) {
  if (d.peak_flops_fp32 <= 0) missing("peak_flops_fp32");
  if (d.peak_flops_half <= 0) missing("peak_flops_half");
  if (d.memory_bytes <= 0) missing("memory_gb");
}

YamlFields device_entry(const YamlFields& y, std::size_t i) {
  return YamlFields(y.node()["devices"][i], y.source(), "devices[" + std::to_string(i) + "].");
}

void check_complete(const Hardware& h, const YamlFields& y) {
  const auto missing = [&](const std::string& section, const std::string& field) {
    if (y.has(section)) y.child(section).fail(field, kMissing);
    y.fail(section + "." + field, kMissing);
  };
  if (h.devices.empty()) check_device(h.device, [&](const std::string& field) { missing("device", field); });
  for (std::size_t i = 0; i < h.devices.size(); ++i) {
    check_device(h.devices[i], [&](const std::string& field) { device_entry(y, i).fail(field, kMissing); });
  }
  if (h.topology.intra.bandwidth <= 0) missing("topology", "intra");
  if (h.topology.kind == TopologyKind::PcieTree && h.topology.bridge.bandwidth <= 0) missing("topology", "bridge");
  if ((h.topology.kind == TopologyKind::MultiHost || h.topology.kind == TopologyKind::Cluster) &&
      h.topology.inter.bandwidth <= 0) {
    missing("topology", "inter");
  }
}

// calibration: what `pipetwin calibrate` fitted the file on, its residuals and
// coefficients. People read it, the simulator does not, but its shape is
// checked so that a corrupted or mis-edited file is refused, not half-read.
// Fields it does not know are left alone (later versions may add some).
void check_calibration(const YamlFields& c, Hardware& h) {
  if (c.has("prediction_error")) h.prediction_error = c.non_negative_number("prediction_error");
  // fitted_on: any list (a file name, or a mapping describing the run, per trace).
  if (c.has("fitted_on") && !c.node()["fitted_on"].IsSequence()) c.fail("fitted_on", "expected a list of the traces");
  if (c.has("coefficients")) {  // [{name, value, how}]
    const YAML::Node n = c.node()["coefficients"];
    if (!n.IsSequence()) c.fail("coefficients", "expected a list of {name, value, how}");
    for (std::size_t i = 0; i < n.size(); ++i) {
      const YamlFields entry(n[i], c.source(), "calibration.coefficients[" + std::to_string(i) + "].");
      (void)entry.text("name");
      double v = 0;
      const YAML::Node value = n[i]["value"];
      if (!value || !value.IsScalar() || !YAML::convert<double>::decode(value, v)) entry.fail("value", "expected a number");
    }
  }
  if (c.has("notes")) {
    const YAML::Node n = c.node()["notes"];
    if (!n.IsSequence()) c.fail("notes", "expected a list of lines of text");
    for (std::size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar()) {
        throw Error(c.source() + ":" + std::to_string(n[i].Mark().line + 1) + ": field 'calibration.notes[" +
                    std::to_string(i) + "]': expected a line of text");
      }
    }
  }
  if (c.has("observations")) (void)c.non_negative_number("observations");
  for (const char* key : {"residuals", "residuals_shared_cores"}) {
    if (!c.has(key)) continue;
    const YamlFields residuals = c.child(key);  // op -> {count, rms_us, max_us, rms_rel, max_rel}
    for (const auto& entry : residuals.node()) {
      const YamlFields r = residuals.child(entry.first.Scalar());
      for (const auto& stat : r.node()) (void)r.non_negative_number(stat.first.Scalar());
    }
  }
}

}  // namespace

Hardware hardware_from_yaml(const YamlFields& y) {
  // calibration: what `pipetwin calibrate` fitted the file on and its residuals (read by people; checked for shape).
  y.reject_unknown({"preset", "name", "source", "device", "devices", "topology", "calibration"});
  Hardware h;
  if (y.has("preset")) {
    const std::string name = y.text("preset");  // its own error names file, line and field
    try {
      h = preset(name);
    } catch (const Error& e) {
      y.fail("preset", e.what());
    }
    h.source = "overrides of preset " + h.name + " in " + y.source() + "; " + h.source;
  }
  if (y.has("name")) h.name = y.line("name");
  if (y.has("source")) h.source = y.text("source");
  if (h.name.empty()) h.name = std::filesystem::path(y.source()).stem().string();
  if (y.has("device")) apply_device(h.device, y.child("device"));
  if (y.has("topology")) apply_topology(h.topology, y.child("topology"));
  if (y.has("calibration")) check_calibration(y.child("calibration"), h);
  if (y.has("devices")) {
    const YAML::Node list = y.node()["devices"];
    if (!list.IsSequence() || list.size() == 0) y.fail("devices", "expected a non-empty list of devices, one per rank");
    if (list.size() > 100'000) y.fail("devices", "lists more than 100000 devices");
    h.devices.clear();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const YamlFields entry = device_entry(y, i);
      Device d = h.device;
      if (entry.has("preset")) {
        const std::string name = entry.text("preset");
        try {
          d = preset(name).device;
        } catch (const Error& e) {
          entry.fail("preset", e.what());
        }
      }
      apply_device(d, entry, /*preset_allowed=*/true);
      h.devices.push_back(d);
    }
  }
  check_complete(h, y);
  if (!h.devices.empty() && h.device.peak_flops_fp32 <= 0) h.device = h.devices.front();
  return h;
}
}  // namespace pipetwin::models
