// Devices, links and topologies, the hardware presets, and the YAML hardware
// spec (a preset name, a file, or a file that overrides a preset's fields).
//
// Heterogeneous hardware lists one device per rank under `devices:`, each
// starting from the file's `device` (or from its own `preset:`):
//
//   preset: v100
//   devices: [{}, {}, {preset: p100}, {preset: p100}]     # ranks 0-1 V100, 2-3 P100
//
// Units in code: seconds, bytes, FLOP/s, bytes/s. Units in YAML: *_us
// (microseconds), memory_gb and *_gbps (10^9 bytes, 10^9 bytes/s), FLOP/s.
#pragma once

#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/yaml_file.hpp"

namespace pipetwin::models {

// Achieved share of peak as a function of the work of one operation:
// eff(w) = max * w / (w + half_flops); half_flops = 0 means always max.
struct Efficiency {
  double max = 1.0;
  double half_flops = 0;
  double at(double flops) const;
};

struct Device {
  std::string name;
  double peak_flops_fp32 = 0;
  double peak_flops_half = 0;  // bf16 / fp16 (tensor cores, MXU)
  Efficiency efficiency;
  double memory_bytes = 0;
  double memory_bandwidth = 0;   // bytes/s
  double op_overhead_s = 0;      // per compute operation (kernel launch)
  double transfer_overhead_s = 0;  // per transfer, on top of the link
  double peak_flops(Precision p) const;
  // Time of one operation of `flops` work at this device's efficiency.
  double compute_seconds(double flops, Precision p) const;
};

struct Link {
  double latency_s = 0;
  double bandwidth = 0;  // bytes/s, each direction
  double seconds(double bytes) const { return latency_s + bytes / bandwidth; }
};

enum class TopologyKind {
  AllToAll,  // every device pair has its own link (NVLink switch, TPU ICI)
  PcieTree,  // devices under PCIe switches, switches under the host bridge
  MultiHost, // devices_per_host all-to-all inside a host, hosts over a network
  SharedHost,  // every rank is a process on one host of host_cores cores (a CPU box)
};
std::string_view topology_name(TopologyKind kind);

// One hop of a route, named so that sim/ can create each link once.
struct Hop {
  std::string link;  // e.g. "dev3-sw0", "sw0-host", "host1-net"
  Link spec;
};

struct Topology {
  TopologyKind kind = TopologyKind::AllToAll;
  int devices_per_host = 8;
  int devices_per_switch = 4;
  int host_cores = 1;  // SharedHost: ranks beyond this count share cores
  Link intra;   // device-device (all-to-all), device-switch (PCIe), inside a host (multi-host), loopback (shared)
  Link bridge;  // switch-host bridge (PCIe tree)
  Link inter;   // host-network (multi-host)
  std::vector<Hop> route(int from_device, int to_device) const;
  // The route as one link: latencies add up, the narrowest hop sets the bandwidth.
  Link path(int from_device, int to_device) const;
};

struct Hardware {
  std::string name;
  std::string source;  // where the figures come from
  Device device;       // every rank's device, unless `devices` lists them one by one
  Topology topology;
  std::vector<Device> devices;  // heterogeneous hardware: rank r on devices[r]; empty: `device` everywhere
  // The device of each of `ranks` ranks; throws when `devices` lists fewer.
  std::vector<Device> rank_devices(int ranks) const;
  // "4 x V100 PCIe", or the devices one by one when they differ.
  std::string describe_devices(int ranks) const;
};

const std::vector<std::string>& preset_names();
Hardware preset(const std::string& name);  // throws, listing the valid names
Hardware hardware_from_yaml(const YamlFields& fields);
// A preset name, or a YAML file (which may start from `preset:` and override fields).
Hardware load_hardware(const std::string& name_or_path);

}  // namespace pipetwin::models
