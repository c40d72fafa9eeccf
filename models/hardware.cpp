// Device and link arithmetic, routes through a topology, YAML hardware specs.
#include "models/hardware.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "schedule/error.hpp"

namespace pipetwin::models {

double Efficiency::at(double flops) const { return half_flops <= 0 ? max : max * flops / (flops + half_flops); }

double Device::peak_flops(Precision p) const { return p == Precision::FP32 ? peak_flops_fp32 : peak_flops_half; }

double Device::compute_seconds(double flops, Precision p) const {
  if (flops <= 0) return 0;
  return op_overhead_s + flops / (peak_flops(p) * efficiency.at(flops));
}

std::string_view topology_name(TopologyKind kind) {
  switch (kind) {
    case TopologyKind::AllToAll: return "all-to-all";
    case TopologyKind::PcieTree: return "pcie-tree";
    case TopologyKind::MultiHost: return "multi-host";
    case TopologyKind::SharedHost: return "shared-host";
  }
  return "?";
}

std::vector<Hop> Topology::route(int a, int b) const {
  const auto dev = [](int d) { return "dev" + std::to_string(d); };
  if (a == b) return {};
  switch (kind) {
    case TopologyKind::AllToAll:
      return {{dev(std::min(a, b)) + "-" + dev(std::max(a, b)), intra}};
    case TopologyKind::PcieTree: {
      const int sa = a / devices_per_switch, sb = b / devices_per_switch;
      const auto up = [&](int d, int s) { return Hop{dev(d) + "-sw" + std::to_string(s), intra}; };
      if (sa == sb) return {up(a, sa), up(b, sb)};
      return {up(a, sa), {"sw" + std::to_string(sa) + "-host", bridge}, {"sw" + std::to_string(sb) + "-host", bridge},
              up(b, sb)};
    }
    case TopologyKind::SharedHost:
      return {{"loopback", intra}};
    case TopologyKind::MultiHost: {
      const int ha = a / devices_per_host, hb = b / devices_per_host;
      if (ha == hb) return {{dev(std::min(a, b)) + "-" + dev(std::max(a, b)), intra}};
      return {{"host" + std::to_string(ha) + "-net", inter}, {"host" + std::to_string(hb) + "-net", inter}};
    }
  }
  return {};
}

Link Topology::path(int a, int b) const {
  Link total{0, 0};
  for (const auto& hop : route(a, b)) {
    total.latency_s += hop.spec.latency_s;
    total.bandwidth = total.bandwidth == 0 ? hop.spec.bandwidth : std::min(total.bandwidth, hop.spec.bandwidth);
  }
  if (total.bandwidth == 0) total.bandwidth = 1e300;  // same device: no transfer cost
  return total;
}

namespace {

constexpr double kGB = 1e9, kUs = 1e-6;

Link link_from_yaml(const YamlFields& y) {
  y.reject_unknown({"latency_us", "bandwidth_gbps"});
  return {y.non_negative_number("latency_us") * kUs, y.positive_number("bandwidth_gbps") * kGB};
}

void apply_device(Device& d, const YamlFields& y, bool preset_allowed = false) {
  std::vector<std::string> known{"name",       "peak_flops_fp32", "peak_flops_half",     "memory_gb", "memory_bandwidth_gbps",
                                 "efficiency", "op_overhead_us",  "transfer_overhead_us"};
  if (preset_allowed) known.push_back("preset");
  y.reject_unknown(known);
  if (y.has("name")) d.name = y.text("name");
  if (y.has("peak_flops_fp32")) d.peak_flops_fp32 = y.positive_number("peak_flops_fp32");
  if (y.has("peak_flops_half")) d.peak_flops_half = y.positive_number("peak_flops_half");
  if (y.has("memory_gb")) d.memory_bytes = y.positive_number("memory_gb") * kGB;
  if (y.has("memory_bandwidth_gbps")) d.memory_bandwidth = y.positive_number("memory_bandwidth_gbps") * kGB;
  if (y.has("op_overhead_us")) d.op_overhead_s = y.non_negative_number("op_overhead_us") * kUs;
  if (y.has("transfer_overhead_us")) d.transfer_overhead_s = y.non_negative_number("transfer_overhead_us") * kUs;
  if (y.has("efficiency")) {
    const YamlFields e = y.child("efficiency");
    e.reject_unknown({"max", "half_flops"});
    if (e.has("max")) {
      d.efficiency.max = e.positive_number("max");
      if (d.efficiency.max > 1) e.fail("max", "is a share of peak and must be at most 1");
    }
    if (e.has("half_flops")) d.efficiency.half_flops = e.non_negative_number("half_flops");
  }
}

void apply_topology(Topology& t, const YamlFields& y) {
  y.reject_unknown({"kind", "devices_per_host", "devices_per_switch", "host_cores", "intra", "bridge", "inter"});
  if (y.has("kind")) {
    const std::string k = y.text("kind");
    if (k == "all-to-all") t.kind = TopologyKind::AllToAll;
    else if (k == "pcie-tree") t.kind = TopologyKind::PcieTree;
    else if (k == "multi-host") t.kind = TopologyKind::MultiHost;
    else if (k == "shared-host") t.kind = TopologyKind::SharedHost;
    else y.fail("kind", "unknown topology '" + k + "' (valid: all-to-all, pcie-tree, multi-host, shared-host)");
  }
  if (y.has("devices_per_host")) t.devices_per_host = static_cast<int>(y.positive_int("devices_per_host"));
  if (y.has("devices_per_switch")) t.devices_per_switch = static_cast<int>(y.positive_int("devices_per_switch"));
  if (y.has("host_cores")) t.host_cores = static_cast<int>(y.positive_int("host_cores"));
  if (y.has("intra")) t.intra = link_from_yaml(y.child("intra"));
  if (y.has("bridge")) t.bridge = link_from_yaml(y.child("bridge"));
  if (y.has("inter")) t.inter = link_from_yaml(y.child("inter"));
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
  if (h.topology.kind == TopologyKind::MultiHost && h.topology.inter.bandwidth <= 0) missing("topology", "inter");
}

}  // namespace

Hardware hardware_from_yaml(const YamlFields& y) {
  y.reject_unknown({"preset", "name", "source", "device", "devices", "topology"});
  Hardware h;
  if (y.has("preset")) {
    try {
      h = preset(y.text("preset"));
    } catch (const Error& e) {
      y.fail("preset", e.what());
    }
    h.source = "overrides of preset " + h.name + " in " + y.source() + "; " + h.source;
  }
  if (y.has("name")) h.name = y.text("name");
  if (y.has("source")) h.source = y.text("source");
  if (h.name.empty()) h.name = std::filesystem::path(y.source()).stem().string();
  if (y.has("device")) apply_device(h.device, y.child("device"));
  if (y.has("topology")) apply_topology(h.topology, y.child("topology"));
  if (y.has("devices")) {
    const YAML::Node list = y.node()["devices"];
    if (!list.IsSequence() || list.size() == 0) y.fail("devices", "expected a non-empty list of devices, one per rank");
    if (list.size() > 100'000) y.fail("devices", "lists more than 100000 devices");
    h.devices.clear();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const YamlFields entry = device_entry(y, i);
      Device d = h.device;
      if (entry.has("preset")) {
        try {
          d = preset(entry.text("preset")).device;
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

std::vector<Device> Hardware::rank_devices(int ranks) const {
  if (devices.empty()) return std::vector<Device>(ranks, device);
  if (ranks > static_cast<int>(devices.size())) {
    throw Error("hardware " + name + " lists " + std::to_string(devices.size()) + " devices (devices:), not enough for " +
                std::to_string(ranks) + " ranks");
  }
  return {devices.begin(), devices.begin() + ranks};
}

std::string Hardware::describe_devices(int ranks) const {
  const auto list = devices.empty() ? std::vector<Device>(1, device) : rank_devices(ranks);
  const auto same = [](const Device& a, const Device& b) {
    return a.name == b.name && a.peak_flops_fp32 == b.peak_flops_fp32 && a.peak_flops_half == b.peak_flops_half &&
           a.efficiency.max == b.efficiency.max && a.efficiency.half_flops == b.efficiency.half_flops &&
           a.memory_bytes == b.memory_bytes && a.memory_bandwidth == b.memory_bandwidth &&
           a.op_overhead_s == b.op_overhead_s && a.transfer_overhead_s == b.transfer_overhead_s;
  };
  if (std::all_of(list.begin(), list.end(), [&](const Device& d) { return same(d, list.front()); })) {
    return std::to_string(ranks) + " x " + list.front().name;
  }
  std::string out;
  for (const auto& d : list) {
    char memory[32];
    std::snprintf(memory, sizeof memory, " (%g GB)", d.memory_bytes / 1e9);
    out += (out.empty() ? "" : ", ") + d.name + memory;
  }
  return out;
}

Hardware load_hardware(const std::string& name_or_path) {
  const auto& names = preset_names();
  if (std::find(names.begin(), names.end(), name_or_path) != names.end()) return preset(name_or_path);
  if (!std::filesystem::exists(name_or_path)) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error("hardware '" + name_or_path + "' is neither a preset (" + list + ") nor a file");
  }
  return hardware_from_yaml(YamlFields(load_yaml_file(name_or_path), name_or_path));
}

}  // namespace pipetwin::models
