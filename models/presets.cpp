// Hardware presets with their published figures. Peak FLOP/s, memory and
// bandwidth are the vendors' (dense, no sparsity); efficiency curves, per-op
// overheads and link latencies are pipetwin's defaults until calibrated.
#include <functional>
#include <map>
#include <string>

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

// GPU nodes (TopologyKind::Cluster): `gpus` GPUs of one NVSwitch (or PCIe)
// port each, `nics` NICs, under leaves of nodes_per_leaf nodes. Latencies are
// per hop, a route crossing two: 1 µs a port (GPU to GPU 2 µs, as the a100 and
// h100 presets) and 2.5 µs a NIC (NIC to NIC 5 µs, InfiniBand with GPUDirect
// RDMA), defaults until calibrated.
Topology cluster(int gpus, double port_gbps, int nics, double nic_gbit, Network network = Network::FatTree,
                 int nodes_per_leaf = 32, double oversubscription = 1) {
  Topology t;
  t.kind = TopologyKind::Cluster;
  t.devices_per_host = gpus;
  t.nics_per_host = nics;
  t.network = network;
  t.nodes_per_leaf = nodes_per_leaf;
  t.oversubscription = oversubscription;
  t.intra = {1 * us, port_gbps * G};
  t.inter = {2.5 * us, nic_gbit / 8 * G};  // Gbit/s per direction -> bytes/s
  return t;
}

const Efficiency kGpuCurve{0.6, 2e9, {}};  // default until calibrated: half of max at 2 GFLOP per op

// The GPUs of the node presets (datasheets: dense tensor-core bf16, fp32 without TF32).
Device a100_sxm4(double mem_gb, double hbm_gbps) {
  return device("A100 SXM4 " + std::to_string(static_cast<int>(mem_gb)) + "GB", 19.5 * T, 312 * T, mem_gb, hbm_gbps,
                kGpuCurve, 8, 5);
}
Device h100_sxm5() { return device("H100 SXM5", 67 * T, 989 * T, 80, 3350, kGpuCurve, 6, 4); }

// Sources of the node presets' figures.
constexpr const char* kA100Sheet =
    "NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4): 19.5 TFLOPS fp32, 312 TFLOPS bf16 dense; "
    "DGX A100 datasheet and architecture blog: NVLink 3 through 6 NVSwitches, 600 GB/s per GPU (300 each way), "
    "8 ConnectX-6 HDR 200 Gb/s compute NICs (25 GB/s each way; the storage NICs not modelled)";
constexpr const char* kH100Sheet =
    "NVIDIA H100 datasheet: H100 SXM5 67 TFLOPS fp32, 989 TFLOPS bf16 dense; DGX H100 datasheet and user guide: "
    "NVLink 4 through 4 NVSwitches, 900 GB/s per GPU (450 each way), 8 ConnectX-7 400 Gb/s compute NICs "
    "(50 GB/s each way)";
const Efficiency kTpuCurve{0.6, 4e9, {}};

using PresetTable = std::map<std::string, std::function<Hardware()>>;

// GPU nodes of 8 and the clusters they make (topology `cluster`).
PresetTable node_presets() {
  return {
      {"dgx-a100-40gb",
       [] {
         return Hardware{"dgx-a100-40gb",
                         std::string("DGX A100 nodes of 8 A100 SXM4 40 GB (HBM2, 1,555 GB/s). ") + kA100Sheet +
                             ". Fat-tree of 32 nodes a leaf, full bisection (a default)",
                         a100_sxm4(40, 1555), cluster(8, 300, 8, 200), {}};
       }},
      {"dgx-a100-80gb",
       [] {
         return Hardware{"dgx-a100-80gb",
                         std::string("DGX A100 nodes of 8 A100 SXM4 80 GB (HBM2e, 2,039 GB/s). ") + kA100Sheet +
                             ". Fat-tree of 32 nodes a leaf, full bisection (a default)",
                         a100_sxm4(80, 2039), cluster(8, 300, 8, 200), {}};
       }},
      {"dgx-h100",
       [] {
         return Hardware{"dgx-h100",
                         std::string("DGX H100 nodes of 8 H100 SXM5 80 GB (HBM3, 3.35 TB/s). ") + kH100Sheet +
                             ". Fat-tree of 32 nodes a leaf, full bisection (a default)",
                         h100_sxm5(), cluster(8, 450, 8, 400), {}};
       }},
      {"hgx-h200",
       [] {
         return Hardware{"hgx-h200",
                         "HGX H200 nodes of 8 H200 SXM 141 GB (H200 datasheet: HBM3e, 4.8 TB/s; the H100's GH100 die, "
                         "67 TFLOPS fp32, 989 TFLOPS bf16 dense; NVLink 4, 900 GB/s per GPU, 450 each way), 8 ConnectX-7 "
                         "400 Gb/s NICs (50 GB/s each way). Fat-tree of 32 nodes a leaf, full bisection (a default)",
                         device("H200 SXM", 67 * T, 989 * T, 141, 4800, kGpuCurve, 6, 4), cluster(8, 450, 8, 400), {}};
       }},
      {"pcie-8gpu",
       [] {
         return Hardware{"pcie-8gpu",
                         "a PCIe server of 8 L40S 48 GB, no NVLink (L40S datasheet: 91.6 TFLOPS fp32, 362.05 TFLOPS "
                         "bf16 dense, GDDR6 864 GB/s, PCIe Gen4 x16 64 GB/s both ways: 31.5 GB/s each way after "
                         "128b/130b coding, the port each GPU reaches the others through the host by), 2 NICs of "
                         "200 Gb/s (25 GB/s each way) shared by 4 GPUs each. Fat-tree of 32 nodes a leaf, full "
                         "bisection (a default)",
                         device("L40S", 91.6 * T, 362.05 * T, 48, 864, kGpuCurve, 8, 5), cluster(8, 31.5, 2, 200), {}};
       }},
      {"selene",
       [] {
         return Hardware{"selene",
                         std::string("NVIDIA Selene: DGX A100 80 GB nodes (560 nodes; Microsoft and NVIDIA's MT-NLG "
                                     "post, 2021), 8 HDR 200 Gb/s compute NICs per node (Narayanan et al., SC 2021), "
                                     "a rail-optimised full fat-tree with scalable units of 20 nodes (DGX SuperPOD "
                                     "reference architecture RA-09950-001): a rail network, 20 nodes a pod, 1:1. ") +
                             kA100Sheet,
                         a100_sxm4(80, 2039), cluster(8, 300, 8, 200, Network::Rail, 20, 1), {}};
       }},
  };
}

const PresetTable& table() {
  static const PresetTable presets = [] {
    PresetTable all = node_presets();
    all.merge(PresetTable{
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
    });
    return all;
  }();
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
