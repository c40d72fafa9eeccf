// hardware_to_yaml: a Hardware as the YAML that hardware_from_yaml reads back
// to the same values (17 significant digits), as calibrate writes it.
#include <cmath>
#include <cstdio>

#include "models/hardware.hpp"
#include "models/yaml_file.hpp"

namespace pipetwin::models {
namespace {
constexpr double kGB = 1e9, kUs = 1e-6;
}  // namespace

namespace {

std::string curve(const Efficiency& e) {
  if (!e.points.empty()) {
    std::string out;
    for (const auto& [w, eff] : e.points) {
      out += (out.empty() ? "" : ", ") + std::string("[") + yaml_number(w) + ", " + yaml_number(eff) + "]";
    }
    return "{points: [" + out + "]}";
  }
  return "{max: " + yaml_number(e.max) + ", half_flops: " + yaml_number(e.half_flops) + "}";
}
std::string link(const Link& l) {
  return "{latency_us: " + yaml_number(l.latency_s / kUs) + ", bandwidth_gbps: " + yaml_number(l.bandwidth / kGB) + "}";
}

void device_yaml(std::string& out, const Device& d, const std::string& indent) {
  const auto field = [&](const std::string& key, const std::string& value) { out += indent + key + ": " + value + "\n"; };
  field("name", yaml_quoted(d.name));
  field("peak_flops_fp32", yaml_number(d.peak_flops_fp32));
  field("peak_flops_half", yaml_number(d.peak_flops_half));
  if (d.peak_flops_fp8 > 0) field("peak_flops_fp8", yaml_number(d.peak_flops_fp8));
  field("memory_gb", yaml_number(d.memory_bytes / kGB));
  if (d.memory_reserve_bytes > 0) field("memory_reserve_gb", yaml_number(d.memory_reserve_bytes / kGB));
  if (d.memory_reserve_fraction > 0) field("memory_reserve_fraction", yaml_number(d.memory_reserve_fraction));
  if (d.memory_bandwidth > 0) field("memory_bandwidth_gbps", yaml_number(d.memory_bandwidth / kGB));
  field("memory_efficiency", yaml_number(d.memory_efficiency));
  field("blocking_sends", d.blocking_sends ? "true" : "false");
  field("overlap_factor", yaml_number(d.overlap_factor));
  field("efficiency", curve(d.efficiency));
  if (!d.attention.empty()) {
    const auto rates = [](const AttentionRates::Curve& c) {
      std::string v;
      for (const auto& [seq, rate] : c) v += (v.empty() ? "" : ", ") + std::string("[") + yaml_number(seq) + ", " + yaml_number(rate / 1e12) + "]";
      return "[" + v + "]";
    };
    out += indent + "attention:\n";
    out += indent + "  forward: " + rates(d.attention.forward) + "\n";
    out += indent + "  forward_causal: " + rates(d.attention.forward_causal) + "\n";
    out += indent + "  backward: " + rates(d.attention.backward) + "\n";
    if (!d.attention.backward_causal.empty()) out += indent + "  backward_causal: " + rates(d.attention.backward_causal) + "\n";
  }
  field("op_overhead_us", yaml_number(d.op_overhead_s / kUs));
  field("transfer_overhead_us", yaml_number(d.transfer_overhead_s / kUs));
  if (d.step_overhead_s) field("step_overhead_us", yaml_number(*d.step_overhead_s / kUs));
  if (d.recv_overhead_s > 0) field("recv_overhead_us", yaml_number(d.recv_overhead_s / kUs));
  if (d.recv_bandwidth > 0) field("recv_bandwidth_gbps", yaml_number(d.recv_bandwidth / kGB));
  if (d.send_bandwidth > 0) field("send_bandwidth_gbps", yaml_number(d.send_bandwidth / kGB));
  if (d.cold_weights_bandwidth > 0) field("cold_weights_gbps", yaml_number(d.cold_weights_bandwidth / kGB));
  const auto per_pass = [&](const std::string& key, const ActionOverheads& a, double unit) {
    if (a == ActionOverheads{}) return;
    std::string v = "{forward: " + yaml_number(a.forward_s / unit) + ", backward: " + yaml_number(a.backward_s / unit);
    if (a.forward_nograd_s) v += ", forward_nograd: " + yaml_number(*a.forward_nograd_s / unit);
    if (a.recompute_s) v += ", recompute: " + yaml_number(*a.recompute_s / unit);
    field(key, v + "}");
  };
  per_pass("action_overhead_us", d.action_overhead, kUs);
  per_pass("weight_stream_us_per_mb", d.weight_stream, kUs / 1e6);
  if (!d.kinds.empty()) {
    out += indent + "kinds:\n";
    for (const auto& [kind, c] : d.kinds) {
      out += indent + "  " + kind + ":\n";
      out += indent + "    forward: " + curve(c.forward) + "\n";
      out += indent + "    backward: " + curve(c.backward) + "\n";
      if (c.forward_nograd) out += indent + "    forward_nograd: " + curve(*c.forward_nograd) + "\n";
      if (c.recompute) out += indent + "    recompute: " + curve(*c.recompute) + "\n";
      if (c.per_operator) out += indent + "    per_operator: true\n";
      if (c.weight_grad_share) out += indent + "    weight_grad_share: " + yaml_number(*c.weight_grad_share) + "\n";
    }
  }
}

}  // namespace

std::string hardware_to_yaml(const Hardware& h, const std::string& header_comment, const std::string& extra) {
  std::string out;
  if (!header_comment.empty()) {
    std::size_t begin = 0;
    while (begin <= header_comment.size()) {
      const auto end = header_comment.find('\n', begin);
      const std::string line = header_comment.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      out += line.empty() ? "#\n" : "# " + line + "\n";
      if (end == std::string::npos) break;
      begin = end + 1;
    }
  }
  out += "name: " + yaml_quoted(h.name) + "\n";
  out += "source: " + yaml_quoted(h.source) + "\n";
  out += "device:\n";
  device_yaml(out, h.device, "  ");
  const Topology& t = h.topology;
  out += "topology:\n";
  out += "  kind: " + std::string(topology_name(t.kind)) + "\n";
  out += "  devices_per_host: " + std::to_string(t.devices_per_host) + "\n";
  out += "  devices_per_switch: " + std::to_string(t.devices_per_switch) + "\n";
  out += "  host_cores: " + std::to_string(t.host_cores) + "\n";
  const Topology defaults;
  if (t.kind == TopologyKind::Cluster || t.nics_per_host != defaults.nics_per_host || t.network != defaults.network ||
      t.nodes_per_leaf != defaults.nodes_per_leaf || t.oversubscription != defaults.oversubscription) {
    out += "  nics_per_host: " + std::to_string(t.nics_per_host) + "\n";
    out += "  network: " + std::string(network_name(t.network)) + "\n";
    out += "  nodes_per_leaf: " + std::to_string(t.nodes_per_leaf) + "\n";
    out += "  oversubscription: " + yaml_number(t.oversubscription) + "\n";
  }
  if (t.effective_cores > 0) out += "  effective_cores: " + yaml_number(t.effective_cores) + "\n";
  if (t.oversubscribed_cores > 0) out += "  oversubscribed_cores: " + yaml_number(t.oversubscribed_cores) + "\n";
  if (t.oversubscribed_send_s > 0) out += "  oversubscribed_send_us: " + yaml_number(t.oversubscribed_send_s / kUs) + "\n";
  if (t.oversubscribed_recv_s > 0) out += "  oversubscribed_recv_us: " + yaml_number(t.oversubscribed_recv_s / kUs) + "\n";
  if (t.full_host_send_s > 0) out += "  full_host_send_us: " + yaml_number(t.full_host_send_s / kUs) + "\n";
  if (t.full_host_recv_s > 0) out += "  full_host_recv_us: " + yaml_number(t.full_host_recv_s / kUs) + "\n";
  if (t.oversubscribed_compute > 0) out += "  oversubscribed_compute: " + yaml_number(t.oversubscribed_compute) + "\n";
  if (t.oversubscribed_action_s > 0) out += "  oversubscribed_action_us: " + yaml_number(t.oversubscribed_action_s / kUs) + "\n";
  if (t.run_to_completion) out += "  run_to_completion: true\n";
  if (t.time_slice_s > 0) out += "  time_slice_us: " + yaml_number(t.time_slice_s / kUs) + "\n";
  if (t.wake_preempt_s > 0) out += "  wake_preempt_us: " + yaml_number(t.wake_preempt_s / kUs) + "\n";
  if (t.core_affinity) out += "  core_affinity: true\n";
  out += "  intra: " + link(t.intra) + "\n";
  if (t.bridge.bandwidth > 0) out += "  bridge: " + link(t.bridge) + "\n";
  if (t.inter.bandwidth > 0) out += "  inter: " + link(t.inter) + "\n";
  if (t.collective.bandwidth > 0) out += "  collective: " + link(t.collective) + "\n";
  if (t.tensor_collective.bandwidth > 0) out += "  tensor_collective: " + link(t.tensor_collective) + "\n";
  if (t.exchange.bandwidth > 0) out += "  all_to_all: " + link(t.exchange) + "\n";
  if (t.tensor_compute > 0) out += "  tensor_compute: " + yaml_number(t.tensor_compute) + "\n";
  if (!h.devices.empty()) {
    out += "devices:\n";
    for (const auto& d : h.devices) {
      std::string entry;
      device_yaml(entry, d, "    ");
      entry.replace(0, 2, "- ");
      out += entry;
    }
  }
  if (!extra.empty()) out += extra + (extra.back() == '\n' ? "" : "\n");
  return out;
}

}  // namespace pipetwin::models
