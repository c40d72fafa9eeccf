// The cluster topology: routes inside a node, under a leaf and across leaves
// on fat-tree and rail networks, NICs shared by GPUs, tensor-parallel group
// routes and ring collectives, the GPU node presets and their YAML.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/hardware.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pm = pipetwin::models;

namespace {

// "name@bandwidth_GBps" per hop, for short comparisons.
std::vector<std::string> hops(const std::vector<pm::Hop>& route) {
  std::vector<std::string> out;
  for (const auto& h : route) {
    char bw[32];
    std::snprintf(bw, sizeof bw, "@%g", h.spec.bandwidth / 1e9);
    out.push_back(h.link + bw);
  }
  return out;
}
using Names = std::vector<std::string>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(Cluster, FatTreeRoutesInsideANodeUnderALeafAndAcrossLeaves) {
  const auto t = pm::preset("dgx-a100-80gb").topology;
  ASSERT_EQ(t.kind, pm::TopologyKind::Cluster);
  EXPECT_EQ(pm::topology_name(t.kind), "cluster");
  // Same node: the two GPUs' NVSwitch ports, 300 GB/s each way.
  EXPECT_EQ(hops(t.route(0, 5)), (Names{"n0-gpu0-nvsw@300", "n0-gpu5-nvsw@300"}));
  EXPECT_EQ(hops(t.route(13, 9)), (Names{"n1-gpu5-nvsw@300", "n1-gpu1-nvsw@300"}));
  EXPECT_DOUBLE_EQ(t.path(0, 5).latency_s, 2e-6);
  // Same leaf (32 nodes): NIC to NIC, any NICs (one leaf switch holds them all).
  EXPECT_EQ(hops(t.route(3, 11)), (Names{"n0-nic3@25", "n1-nic3@25"}));
  EXPECT_EQ(hops(t.route(3, 31 * 8 + 4)), (Names{"n0-nic3@25", "n31-nic4@25"}));
  EXPECT_DOUBLE_EQ(t.path(3, 11).latency_s, 5e-6);
  // Other leaf: up through leaf 0's uplink (32 nodes x 8 NICs x 25 GB/s, 1:1), down leaf 1's.
  EXPECT_EQ(hops(t.route(3, 32 * 8 + 4)), (Names{"n0-nic3@25", "leaf0-up@6400", "leaf1-up@6400", "n32-nic4@25"}));
  EXPECT_DOUBLE_EQ(t.path(3, 32 * 8 + 4).bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(t.path(3, 32 * 8 + 4).latency_s, 5e-6);  // the uplinks add no latency
  EXPECT_TRUE(t.route(7, 7).empty());
  EXPECT_EQ(t.nodes_for(16), 2);
  EXPECT_EQ(t.nodes_for(17), 3);
}

TEST(Cluster, RailNetworkGoesThroughTheSpineBetweenRails) {
  const auto t = pm::preset("selene").topology;
  ASSERT_EQ(t.network, pm::Network::Rail);
  ASSERT_EQ(t.nodes_per_leaf, 20);
  // Same pod, same rail: rail switch 3 alone.
  EXPECT_EQ(hops(t.route(3, 11)), (Names{"n0-nic3@25", "n1-nic3@25"}));
  // Same pod, rail 3 to rail 4: up rail 3's uplink (20 nodes x 25 GB/s), down rail 4's.
  EXPECT_EQ(hops(t.route(3, 12)), (Names{"n0-nic3@25", "leaf0-rail3-up@500", "leaf0-rail4-up@500", "n1-nic4@25"}));
  // Other pod, same rail.
  EXPECT_EQ(hops(t.route(3, 20 * 8 + 3)), (Names{"n0-nic3@25", "leaf0-rail3-up@500", "leaf1-rail3-up@500", "n20-nic3@25"}));
  // Inside a node, as on a fat-tree.
  EXPECT_EQ(hops(t.route(2, 6)), (Names{"n0-gpu2-nvsw@300", "n0-gpu6-nvsw@300"}));
}

TEST(Cluster, OversubscriptionNarrowsTheUplinks) {
  const auto h = pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/h100-cluster-2to1.yaml");
  EXPECT_EQ(h.name, "h100-cluster-2to1");
  EXPECT_EQ(h.topology.nodes_per_leaf, 16);
  EXPECT_DOUBLE_EQ(h.topology.oversubscription, 2);
  // 16 nodes x 8 NICs x 50 GB/s / 2.
  EXPECT_EQ(hops(h.topology.route(0, 16 * 8)), (Names{"n0-nic0@50", "leaf0-up@3200", "leaf1-up@3200", "n16-nic0@50"}));
  EXPECT_EQ(h.device, pm::preset("dgx-h100").device);
}

TEST(Cluster, PcieServerSharesEachNicBetweenFourGpus) {
  const auto t = pm::preset("pcie-8gpu").topology;
  EXPECT_EQ(t.nics_per_host, 2);
  EXPECT_EQ(hops(t.route(0, 7)), (Names{"n0-gpu0-nvsw@31.5", "n0-gpu7-nvsw@31.5"}));
  EXPECT_EQ(hops(t.route(1, 10)), (Names{"n0-nic0@25", "n1-nic0@25"}));  // local GPUs 1 and 2: NIC 0
  EXPECT_EQ(hops(t.route(3, 12)), (Names{"n0-nic0@25", "n1-nic1@25"}));  // local GPU 4: NIC 1
  EXPECT_EQ(hops(t.route(7, 8))[0], "n0-nic1@25");
}

TEST(Cluster, GroupRoutesMergeTheSpansPorts) {
  const auto t = pm::preset("dgx-a100-80gb").topology;
  // Width 1 is the GPU route.
  for (const auto& [a, b] : std::vector<std::pair<int, int>>{{0, 5}, {3, 11}, {3, 260}}) {
    EXPECT_EQ(hops(t.route_group(a, b, 1)), hops(t.route(a, b))) << a << " " << b;
  }
  // Width 2 inside a node: two ports a span.
  EXPECT_EQ(hops(t.route_group(0, 2, 2)), (Names{"n0-gpu0-1-nvsw@600", "n0-gpu2-3-nvsw@600"}));
  EXPECT_EQ(hops(t.route_group(0, 4, 4)), (Names{"n0-gpu0-3-nvsw@1200", "n0-gpu4-7-nvsw@1200"}));
  // Width 2 across nodes: the span's two NICs.
  EXPECT_EQ(hops(t.route_group(2, 10, 2)), (Names{"n0-nic2-3@50", "n1-nic2-3@50"}));
  // Width 8: a whole node, its 8 NICs; the fat-tree uplinks stay as they are (the leaf's).
  EXPECT_EQ(hops(t.route_group(0, 8, 8)), (Names{"n0-nic0-7@200", "n1-nic0-7@200"}));
  EXPECT_EQ(hops(t.route_group(0, 256, 8)), (Names{"n0-nic0-7@200", "leaf0-up@6400", "leaf1-up@6400", "n32-nic0-7@200"}));
  EXPECT_TRUE(t.route_group(8, 8, 8).empty());
}

TEST(Cluster, GroupRoutesOnRailsMergeTheSpansRails) {
  const auto t = pm::preset("selene").topology;
  // The same rails in one pod: rail switches only.
  EXPECT_EQ(hops(t.route_group(2, 10, 2)), (Names{"n0-nic2-3@50", "n1-nic2-3@50"}));
  // Rails 0-1 to rails 2-3 in one pod: through the spine.
  EXPECT_EQ(hops(t.route_group(0, 10, 2)),
            (Names{"n0-nic0-1@50", "leaf0-rail0-1-up@1000", "leaf0-rail2-3-up@1000", "n1-nic2-3@50"}));
  // A whole node to another pod: all 8 rails' uplinks.
  EXPECT_EQ(hops(t.route_group(0, 160, 8)),
            (Names{"n0-nic0-7@200", "leaf0-rail0-7-up@4000", "leaf1-rail0-7-up@4000", "n20-nic0-7@200"}));
}

TEST(Cluster, GroupsSharingANicShareItsLink) {
  const auto t = pm::preset("pcie-8gpu").topology;
  // Local GPUs 0-1 and 2-3 both send through NIC 0: one link, named as the NIC.
  const auto first = t.route_group(0, 8, 2), second = t.route_group(2, 10, 2);
  EXPECT_EQ(hops(first), (Names{"n0-nic0@25", "n1-nic0@25"}));
  EXPECT_EQ(first[0].link, second[0].link);
  EXPECT_EQ(first[1].link, second[1].link);
  EXPECT_EQ(hops(t.route_group(4, 12, 2)), (Names{"n0-nic1@25", "n1-nic1@25"}));
  // Width 4 uses one whole NIC, width 8 both.
  EXPECT_EQ(hops(t.route_group(4, 12, 4)), (Names{"n0-nic1@25", "n1-nic1@25"}));
  EXPECT_EQ(hops(t.route_group(0, 8, 8)), (Names{"n0-nic0-1@50", "n1-nic0-1@50"}));
  EXPECT_EQ(hops(t.route_group(0, 4, 4)), (Names{"n0-gpu0-3-nvsw@126", "n0-gpu4-7-nvsw@126"}));
}

TEST(Cluster, GroupRoutesOnOtherTopologies) {
  // All-to-all: the span's pair links as one.
  const auto a = pm::preset("a100").topology;
  EXPECT_EQ(hops(a.route_group(0, 2, 1)), (Names{"dev0-dev2@300"}));
  EXPECT_EQ(hops(a.route_group(4, 0, 2)), (Names{"dev0-1-dev4-5@600"}));
  // Width 1 anywhere is the device route; wider needs a cluster or all-to-all.
  const auto v = pm::preset("v100").topology;
  EXPECT_EQ(hops(v.route_group(0, 5, 1)), hops(v.route(0, 5)));
  const std::string e = error_of([&] { v.route_group(0, 4, 2); });
  EXPECT_TRUE(has(e, "needs a `cluster`, an `all-to-all` or a `shared-host` topology, not pcie-tree")) << e;
  // Groups that do not divide a node, groups not started at a multiple of the width.
  const auto d = pm::preset("dgx-h100").topology;
  EXPECT_TRUE(has(error_of([&] { d.route_group(0, 3, 3); }), "(devices_per_host)"));
  EXPECT_TRUE(has(error_of([&] { d.route_group(1, 8, 2); }), "device 1 is not the first of a tensor-parallel group of 2"));
  EXPECT_TRUE(has(error_of([&] { d.route_group(0, 8, 0); }), "at least 1 device"));
}

TEST(Cluster, RingCollectivesRunAtEachGpusPort) {
  const auto t = pm::preset("dgx-h100").topology;
  const pm::Link step = t.group_ring_link(8);
  EXPECT_DOUBLE_EQ(step.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(step.latency_s, 2e-6);  // two ports
  const double bytes = 64e6;
  EXPECT_DOUBLE_EQ(t.ring_all_reduce_seconds(bytes, 8), 2 * 7 * (2e-6 + bytes / (8 * 450e9)));
  EXPECT_DOUBLE_EQ(t.ring_all_gather_seconds(bytes, 4), 3 * (2e-6 + bytes / (4 * 450e9)));
  EXPECT_DOUBLE_EQ(t.ring_all_reduce_seconds(bytes, 1), 0);
  EXPECT_DOUBLE_EQ(pm::preset("pcie-8gpu").topology.group_ring_link(2).bandwidth, 31.5e9);
  EXPECT_DOUBLE_EQ(pm::preset("a100").topology.group_ring_link(4).bandwidth, 300e9);
  EXPECT_TRUE(has(error_of([&] { t.group_ring_link(16); }), "devices_per_host"));
  // A shared host's tensor group: processes of the host, their rounds on the
  // loopback, or on its calibrated collective rounds.
  pm::Topology cpu = pm::preset("cpu").topology;
  EXPECT_EQ(cpu.group_ring_link(2), cpu.intra);
  EXPECT_EQ(cpu.route_group(0, 2, 2).size(), 1u);
  cpu.collective = {40e-6, 1.5e9};
  EXPECT_EQ(cpu.group_ring_link(2), cpu.collective);
  EXPECT_DOUBLE_EQ(cpu.ring_all_reduce_seconds(1e6, 2), 2 * (40e-6 + 1e6 / (2 * 1.5e9)));
}

TEST(Cluster, NodePresetsCarryTheirDatasheetFigures) {
  const auto a40 = pm::preset("dgx-a100-40gb"), a80 = pm::preset("dgx-a100-80gb"), h = pm::preset("dgx-h100"),
             h200 = pm::preset("hgx-h200"), l = pm::preset("pcie-8gpu"), s = pm::preset("selene");
  EXPECT_DOUBLE_EQ(a40.device.memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(a40.device.memory_bandwidth, 1555e9);
  EXPECT_DOUBLE_EQ(a80.device.memory_bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(a80.device.peak_flops_half, 312e12);
  EXPECT_DOUBLE_EQ(a80.device.peak_flops_fp32, 19.5e12);
  EXPECT_EQ(a80.device.name, "A100 SXM4 80GB");
  EXPECT_DOUBLE_EQ(h.device.peak_flops_half, 989e12);
  EXPECT_DOUBLE_EQ(h.topology.intra.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h.topology.inter.bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(h200.device.memory_bytes, 141e9);
  EXPECT_DOUBLE_EQ(h200.device.memory_bandwidth, 4800e9);
  EXPECT_DOUBLE_EQ(l.device.peak_flops_half, 362.05e12);
  EXPECT_DOUBLE_EQ(l.device.peak_flops_fp32, 91.6e12);
  EXPECT_DOUBLE_EQ(l.topology.intra.bandwidth, 31.5e9);
  EXPECT_EQ(s.device, a80.device);
  EXPECT_DOUBLE_EQ(s.topology.oversubscription, 1);
  for (const auto* p : {&a40, &a80, &h, &h200, &l, &s}) {
    EXPECT_EQ(p->topology.devices_per_host, 8) << p->name;
    EXPECT_TRUE(has(p->source, "datasheet")) << p->name;
  }
  // The older presets are as they were.
  EXPECT_EQ(pm::preset("a100").topology.kind, pm::TopologyKind::AllToAll);
  EXPECT_EQ(pm::preset("h100").device.name, "H100 SXM5");
}

namespace {

class ClusterFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_cluster_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    pipetwin::schedule::write_file_atomic(path, text);
    return path;
  }
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(ClusterFiles, EveryNodePresetWritesAndReadsBackExactly) {
  for (const std::string name : {"dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "hgx-h200", "pcie-8gpu", "selene"}) {
    const auto p = pm::preset(name);
    const auto text = pm::hardware_to_yaml(p);
    EXPECT_TRUE(has(text, "  kind: cluster\n")) << text;
    const auto q = pm::load_hardware(write(name + ".yaml", text));
    EXPECT_EQ(q.name, p.name);
    EXPECT_EQ(q.source, p.source);
    EXPECT_EQ(q.device, p.device) << name;
    EXPECT_EQ(q.topology, p.topology) << name;
    EXPECT_EQ(pm::hardware_to_yaml(q), text) << name;
  }
  // A cluster of another shape, with every cluster field away from its default.
  auto odd = pm::preset("pcie-8gpu");
  odd.topology.devices_per_host = 4;
  odd.topology.nics_per_host = 4;
  odd.topology.network = pm::Network::Rail;
  odd.topology.nodes_per_leaf = 7;
  odd.topology.oversubscription = 4.0 / 3;
  EXPECT_EQ(pm::load_hardware(write("odd.yaml", pm::hardware_to_yaml(odd))).topology, odd.topology);
}

TEST_F(ClusterFiles, AFileOverridesANodePresetsNetwork) {
  const auto h = pm::load_hardware(write(
      "hw.yaml", "preset: dgx-a100-80gb\ntopology: {network: rail, oversubscription: 2, nodes_per_leaf: 16}\n"));
  EXPECT_EQ(h.topology.kind, pm::TopologyKind::Cluster);
  EXPECT_EQ(h.topology.network, pm::Network::Rail);
  EXPECT_EQ(h.topology.nodes_per_leaf, 16);
  EXPECT_DOUBLE_EQ(h.topology.oversubscription, 2);
  EXPECT_EQ(h.topology.nics_per_host, 8);  // kept from the preset
  EXPECT_EQ(hops(h.topology.route(0, 16 * 8)), (Names{"n0-nic0@25", "leaf0-rail0-up@200", "leaf1-rail0-up@200", "n16-nic0@25"}));
  // The selene preset is dgx-a100-80gb's nodes on a rail network of 20-node pods.
  const auto s = pm::load_hardware(
      write("selene.yaml", "preset: dgx-a100-80gb\nname: selene\ntopology: {network: rail, nodes_per_leaf: 20}\n"));
  EXPECT_EQ(s.topology, pm::preset("selene").topology);
  EXPECT_EQ(s.device, pm::preset("selene").device);
  // A cluster from scratch, 4 GPUs and 1 NIC a node.
  const auto f = pm::load_hardware(write("f.yaml",
                                         "name: lab\ndevice: {peak_flops_fp32: 1e13, peak_flops_half: 4e13, memory_gb: 24}\n"
                                         "topology:\n  kind: cluster\n  devices_per_host: 4\n  nics_per_host: 1\n"
                                         "  intra: {latency_us: 1, bandwidth_gbps: 32}\n  inter: {latency_us: 3, bandwidth_gbps: 12.5}\n"));
  EXPECT_EQ(hops(f.topology.route(1, 6)), (Names{"n0-nic0@12.5", "n1-nic0@12.5"}));
  EXPECT_EQ(f.topology.network, pm::Network::FatTree);
  EXPECT_EQ(f.topology.nodes_per_leaf, 32);
}
