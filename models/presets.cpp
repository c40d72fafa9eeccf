// Hardware presets with their published figures. Peak FLOP/s, memory and
// bandwidth are the vendors' (dense, no sparsity); efficiency curves, per-op
// overheads and link latencies are pipetwin's defaults until calibrated.
#include <functional>
#include <map>

#include "models/hardware.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {
namespace {

constexpr double T = 1e12, G = 1e9, us = 1e-6;

Device device(std::string name, double fp32, double half, double mem_gb, double bw_gbps, Efficiency eff,
              double op_overhead_us, double transfer_overhead_us) {
  Device d;
  d.name = std::move(name);
  d.peak_flops_fp32 = fp32;
  d.peak_flops_half = half;
  d.efficiency = eff;
  d.memory_bytes = mem_gb * G;
  d.memory_bandwidth = bw_gbps * G;
  d.op_overhead_s = op_overhead_us * us;
  d.transfer_overhead_s = transfer_overhead_us * us;
  return d;
}

Topology all_to_all(double latency_us, double gbps) {
  Topology t;
  t.kind = TopologyKind::AllToAll;
  t.intra = {latency_us * us, gbps * G};
  return t;
}

Topology pcie_tree(int per_switch, double latency_us, double gbps, double bridge_latency_us, double bridge_gbps) {
  Topology t;
  t.kind = TopologyKind::PcieTree;
  t.devices_per_switch = per_switch;
  t.intra = {latency_us * us, gbps * G};
  t.bridge = {bridge_latency_us * us, bridge_gbps * G};
  return t;
}

Topology shared_host(int cores, double latency_us, double gbps) {
  Topology t;
  t.kind = TopologyKind::SharedHost;
  t.host_cores = cores;
  t.intra = {latency_us * us, gbps * G};
  return t;
}

const Efficiency kGpuCurve{0.6, 2e9, {}};  // default until calibrated: half of max at 2 GFLOP per op
const Efficiency kTpuCurve{0.6, 4e9, {}};

const std::map<std::string, std::function<Hardware()>>& table() {
  static const std::map<std::string, std::function<Hardware()>> presets{
      {"tpu-v2",
       [] {
         return Hardware{"tpu-v2",
                         "one TPUv2 core (GPipe's accelerator): 45 TFLOPS bf16, 16 GB HBM at 700 GB/s per 2-core chip, "
                         "ICI links of 496 Gbit/s (Jouppi et al., CACM 2020); fp32 assumed 1/4 of bf16",
                         device("TPUv2 core", 5.6 * T, 22.5 * T, 8, 350, kTpuCurve, 5, 2), all_to_all(2, 62), {}};
       }},
      {"tpu-v3",
       [] {
         return Hardware{"tpu-v3",
                         "one TPUv3 core (GPipe's accelerator): 123 TFLOPS bf16, 32 GB HBM at 900 GB/s per 2-core chip, "
                         "ICI links of 656 Gbit/s (Jouppi et al., CACM 2020); fp32 assumed 1/4 of bf16",
                         device("TPUv3 core", 15.4 * T, 61.5 * T, 16, 450, kTpuCurve, 5, 2), all_to_all(2, 82), {}};
       }},
      {"p100",
       [] {
         return Hardware{"p100",
                         "NVIDIA Tesla P100 PCIe 16 GB (datasheet): 9.3 TFLOPS fp32, 18.7 TFLOPS fp16, 732 GB/s; "
                         "no NVLink: PCIe 3.0 x16 (15.75 GB/s), 4 GPUs per switch",
                         device("P100", 9.3 * T, 18.7 * T, 16, 732, kGpuCurve, 10, 5),
                         pcie_tree(4, 5, 15.75, 2, 15.75), {}};
       }},
      {"v100",
       [] {
         return Hardware{"v100",
                         "NVIDIA V100 PCIe 16 GB (datasheet): 14 TFLOPS fp32, 112 TFLOPS tensor fp16, 900 GB/s; "
                         "PCIe 3.0 x16 (15.75 GB/s), 4 GPUs per switch",
                         device("V100 PCIe", 14 * T, 112 * T, 16, 900, kGpuCurve, 10, 5),
                         pcie_tree(4, 5, 15.75, 2, 15.75), {}};
       }},
      {"v100-sxm2",
       [] {
         return Hardware{"v100-sxm2",
                         "NVIDIA V100 SXM2 16 GB (datasheet): 15.7 TFLOPS fp32, 125 TFLOPS tensor fp16, 900 GB/s; "
                         "NVLink 2 at 25 GB/s per link and direction (DGX-1's cube mesh approximated as all-to-all)",
                         device("V100 SXM2", 15.7 * T, 125 * T, 16, 900, kGpuCurve, 10, 5), all_to_all(3, 25), {}};
       }},
      {"a100",
       [] {
         return Hardware{"a100",
                         "NVIDIA A100 SXM4 80 GB (datasheet): 19.5 TFLOPS fp32, 312 TFLOPS bf16, 2039 GB/s; "
                         "NVLink 3 through NVSwitch, 300 GB/s per GPU and direction",
                         device("A100 SXM4 80GB", 19.5 * T, 312 * T, 80, 2039, kGpuCurve, 8, 5), all_to_all(2, 300), {}};
       }},
      {"h100",
       [] {
         return Hardware{"h100",
                         "NVIDIA H100 SXM5 80 GB (datasheet): 67 TFLOPS fp32, 989 TFLOPS bf16 dense, 3.35 TB/s; "
                         "NVLink 4 through NVSwitch, 450 GB/s per GPU and direction",
                         device("H100 SXM5", 67 * T, 989 * T, 80, 3350, kGpuCurve, 6, 4), all_to_all(2, 450), {}};
       }},
      {"cpu",
       [] {
         return Hardware{"cpu",
                         "this machine class (2 cores, 24 GB) with one process per rank, uncalibrated: 50 GFLOPS "
                         "per core assumed; Gloo over loopback measured at ~30 us and ~3 GB/s (DEPENDENCIES)",
                         device("cpu core", 50 * G, 50 * G, 24, 20, {0.5, 1e7, {}}, 5, 0), shared_host(2, 30, 3), {}};
       }},
  };
  return presets;
}

}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& [name, _] : table()) out.push_back(name);
    return out;
  }();
  return names;
}

Hardware preset(const std::string& name) {
  const auto it = table().find(name);
  if (it == table().end()) {
    std::string list;
    for (const auto& n : preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw Error("unknown hardware preset '" + name + "' (valid: " + list + ")");
  }
  return it->second();
}

}  // namespace pipetwin::models
