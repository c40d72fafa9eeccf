// Hardware presets, routes, YAML overrides, and the catalogue of malformed
// model and hardware files: each error names the file, the line and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "models/families.hpp"
#include "models/hardware.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pm = pipetwin::models;

TEST(Presets, EveryPresetLoadsWithASource) {
  EXPECT_EQ(pm::preset_names().size(), 14u);
  for (const auto& name : pm::preset_names()) {
    const auto h = pm::load_hardware(name);
    EXPECT_EQ(h.name, name);
    EXPECT_FALSE(h.source.empty()) << name;
    EXPECT_GT(h.device.peak_flops_fp32, 0) << name;
    EXPECT_GE(h.device.peak_flops_half, h.device.peak_flops_fp32) << name;
    EXPECT_GT(h.device.memory_bytes, 0) << name;
    EXPECT_GT(h.topology.path(0, 1).bandwidth, 0) << name;
  }
  EXPECT_DOUBLE_EQ(pm::preset("tpu-v2").device.memory_bytes, 8e9);
  EXPECT_DOUBLE_EQ(pm::preset("tpu-v3").device.memory_bytes, 16e9);
  EXPECT_DOUBLE_EQ(pm::preset("h100").device.peak_flops_half, 989e12);
}

TEST(Presets, UnknownNameListsTheValidOnes) {
  try {
    pm::load_hardware("b200");
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("v100"), std::string::npos) << e.what();
  }
}

TEST(Topology, PcieTreeRoutesThroughTheHostBridgeAcrossSwitches) {
  const auto t = pm::preset("v100").topology;
  EXPECT_EQ(t.route(0, 1).size(), 2u);  // same switch
  EXPECT_EQ(t.route(0, 5).size(), 4u);  // dev0 -> sw0 -> host -> sw1 -> dev5
  EXPECT_DOUBLE_EQ(t.path(0, 5).latency_s, 2 * t.intra.latency_s + 2 * t.bridge.latency_s);
  EXPECT_TRUE(t.route(3, 3).empty());
}

TEST(Topology, MultiHostUsesTheNetworkBetweenHosts) {
  pm::Topology t;
  t.kind = pm::TopologyKind::MultiHost;
  t.devices_per_host = 4;
  t.intra = {1e-6, 300e9};
  t.inter = {5e-6, 25e9};
  EXPECT_EQ(t.route(0, 3).front().link, "dev0-dev3");
  EXPECT_DOUBLE_EQ(t.path(0, 4).bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(t.path(0, 4).latency_s, 10e-6);
}

TEST(Device, EfficiencyCurve) {
  pm::Device d;
  d.peak_flops_fp32 = 1e12;
  d.efficiency = {0.5, 1e9, {}};
  EXPECT_DOUBLE_EQ(d.compute_seconds(1e9, pm::Precision::FP32), 1e9 / (1e12 * 0.25));
  EXPECT_DOUBLE_EQ(d.compute_seconds(0, pm::Precision::FP32), 0);
}

namespace {

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_hw_" + std::to_string(::getpid()));
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

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_F(Files, HardwareYamlOverridesAPreset) {
  const auto path = write("hw.yaml", "preset: v100\nname: big-v100\ndevice:\n  memory_gb: 32\n  efficiency: {max: 0.7}\n");
  const auto h = pm::load_hardware(path);
  EXPECT_EQ(h.name, "big-v100");
  EXPECT_DOUBLE_EQ(h.device.memory_bytes, 32e9);
  EXPECT_DOUBLE_EQ(h.device.efficiency.max, 0.7);
  EXPECT_DOUBLE_EQ(h.device.peak_flops_half, 112e12);  // kept from the preset
  EXPECT_EQ(pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/v100-32gb.yaml").device.memory_bytes, 32e9);
}

TEST_F(Files, HardwareYamlFromScratch) {
  const auto path = write("hw.yaml",
                          "name: lab\ndevice:\n  peak_flops_fp32: 1e13\n  peak_flops_half: 4e13\n  memory_gb: 24\n"
                          "topology:\n  kind: multi-host\n  devices_per_host: 2\n  intra: {latency_us: 2, bandwidth_gbps: 50}\n"
                          "  inter: {latency_us: 10, bandwidth_gbps: 12.5}\n");
  const auto h = pm::load_hardware(path);
  EXPECT_EQ(h.topology.kind, pm::TopologyKind::MultiHost);
  EXPECT_DOUBLE_EQ(h.topology.path(0, 2).bandwidth, 12.5e9);
}

TEST_F(Files, HeterogeneousHardwareListsOneDevicePerRank) {
  const auto h = pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/v100-p100-mixed.yaml");
  ASSERT_EQ(h.devices.size(), 4u);
  EXPECT_EQ(h.devices[1].name, "V100 PCIe");
  EXPECT_EQ(h.devices[2].name, "P100");
  EXPECT_DOUBLE_EQ(h.devices[2].peak_flops_half, 18.7e12);
  EXPECT_EQ(h.rank_devices(2)[1].name, "V100 PCIe");
  EXPECT_EQ(h.describe_devices(2), "2 x V100 PCIe");
  EXPECT_EQ(h.describe_devices(4), "V100 PCIe (16 GB), V100 PCIe (16 GB), P100 (16 GB), P100 (16 GB)");
  EXPECT_NE(error_of([&] { h.rank_devices(5); }).find("lists 4 devices (devices:), not enough for 5 ranks"), std::string::npos);
  // An entry overrides fields of the file's device.
  const auto o = pm::load_hardware(write("over.yaml", "preset: a100\ndevices:\n  - {memory_gb: 40}\n  - {}\n"));
  EXPECT_DOUBLE_EQ(o.rank_devices(2)[0].memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(o.rank_devices(2)[1].memory_bytes, 80e9);
  EXPECT_DOUBLE_EQ(o.rank_devices(2)[0].peak_flops_half, 312e12);
  EXPECT_EQ(pm::preset("a100").rank_devices(3).size(), 3u);  // no list: the same device on every rank
}

struct BadFile {
  std::string name, text, expected;  // expected: "<line>: field '<field>'" and a reason
  bool hardware;
};

TEST_F(Files, MalformedFilesNameFileLineAndField) {
  const std::vector<BadFile> cases{
      {"missing_field", "family: transformer\nlayers: 2\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 8\n",
       ":1: field 'vocab': missing", false},
      {"negative_size", "family: transformer\nlayers: -2\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 8\nvocab: 10\n",
       ":2: field 'layers': must be positive", false},
      {"unknown_family", "family: capsnet\nlayers: 2\n", ":1: field 'family': unknown family 'capsnet'", false},
      {"wrong_type", "family: mlp\ninput: many\nhidden: [4]\noutput: 2\n", ":2: field 'input': expected an integer", false},
      {"wrong_type_list", "family: mlp\ninput: 4\nhidden: 8\noutput: 2\n", ":3: field 'hidden': expected a non-empty list", false},
      {"unknown_field", "family: mlp\ninput: 4\nhidden: [8]\noutput: 2\ndropout: 0.1\n", ":5: field 'dropout': unknown", false},
      {"heads_do_not_divide", "family: transformer\nlayers: 2\nd_model: 65\nd_ff: 128\nheads: 4\nseq_len: 8\nvocab: 10\n",
       ":5: field 'heads': must divide d_model", false},
      {"bad_precision", "family: mlp\ninput: 4\nhidden: [8]\noutput: 2\nprecision: fp8\n", ":5: field 'precision'", false},
      {"malformed_yaml", "family: mlp\nhidden: [8\n", ":3: malformed YAML", false},
      {"hw_missing_field", "name: x\ndevice:\n  peak_flops_fp32: 1e12\n", ":3: field 'device.peak_flops_half': missing", true},
      {"hw_missing_section", "name: x\ntopology:\n  kind: all-to-all\n", ":1: field 'device.peak_flops_fp32': missing", true},
      {"hw_missing_link", "preset: a100\ntopology:\n  kind: pcie-tree\n", ":3: field 'topology.bridge': missing", true},
      {"hw_negative_link", "preset: a100\ntopology:\n  intra: {latency_us: 1, bandwidth_gbps: -5}\n",
       ":3: field 'topology.intra.bandwidth_gbps': must be positive", true},
      {"hw_wrong_type_int", "preset: v100\ntopology:\n  devices_per_switch: four\n",
       ":3: field 'topology.devices_per_switch': expected an integer", true},
      {"hw_negative", "preset: a100\ndevice:\n  memory_gb: -80\n", ":3: field 'device.memory_gb': must be positive", true},
      {"hw_wrong_type", "preset: a100\ndevice:\n  peak_flops_half: fast\n", ":3: field 'device.peak_flops_half': expected a number",
       true},
      {"hw_unknown_preset", "preset: b200\n", ":1: field 'preset': unknown hardware preset 'b200'", true},
      {"hw_unknown_topology", "preset: a100\ntopology:\n  kind: torus\n", ":3: field 'topology.kind': unknown topology", true},
      {"hw_efficiency_above_one", "preset: a100\ndevice:\n  efficiency: {max: 1.5}\n", ":3: field 'device.efficiency.max'", true},
      {"hw_devices_not_a_list", "preset: a100\ndevices: 4\n", ":2: field 'devices': expected a non-empty list", true},
      {"hw_devices_unknown_field", "preset: a100\ndevices:\n  - {}\n  - {memory: 40}\n", ":4: field 'devices[1].memory': unknown",
       true},
      {"hw_devices_unknown_preset", "preset: a100\ndevices:\n  - {preset: b200}\n",
       ":3: field 'devices[0].preset': unknown hardware preset 'b200'", true},
      {"hw_devices_missing_field",
       "name: x\ntopology:\n  intra: {latency_us: 1, bandwidth_gbps: 10}\ndevices:\n  - {peak_flops_fp32: 1e12, peak_flops_half: 2e12}\n",
       ":5: field 'devices[0].memory_gb': missing", true},
      {"hw_link_not_a_mapping", "preset: a100\ntopology:\n  intra: 300\n", ":3: field 'topology.intra': expected a mapping", true},
      {"hw_oversubscription_below_one", "preset: dgx-h100\ntopology:\n  oversubscription: 0.5\n",
       ":3: field 'topology.oversubscription': is 0.5: must be at least 1", true},
      {"hw_nics_not_dividing_gpus", "preset: dgx-h100\ntopology:\n  nics_per_host: 3\n",
       ":3: field 'topology.nics_per_host': 3 NICs for 8 GPUs per node: nics_per_host must divide devices_per_host", true},
      {"hw_gpus_fewer_than_nics", "preset: dgx-h100\ntopology:\n  devices_per_host: 4\n",
       ":3: field 'topology.devices_per_host': 8 NICs for 4 GPUs per node", true},
      {"hw_unknown_network", "preset: selene\ntopology:\n  network: dragonfly\n",
       ":3: field 'topology.network': unknown network 'dragonfly' (valid: fat-tree, rail)", true},
      {"hw_cluster_missing_inter", "preset: a100\ntopology:\n  kind: cluster\n", ":3: field 'topology.inter': missing", true},
      {"hw_nodes_per_leaf_zero", "preset: dgx-h100\ntopology:\n  nodes_per_leaf: 0\n",
       ":3: field 'topology.nodes_per_leaf': must be positive", true},
  };
  for (const auto& c : cases) {
    const auto path = write(c.name + ".yaml", c.text);
    const std::string msg =
        error_of([&] { c.hardware ? (void)pm::load_hardware(path) : (void)pm::load_model(path); });
    // "<file>:<line>: field '<field>': <reason>", every time.
    ASSERT_EQ(msg.rfind(path + ":", 0), 0u) << c.name << ": " << msg;
    EXPECT_TRUE(std::regex_search(msg.substr(path.size() + 1), std::regex("^[0-9]+: (field '[a-z0-9_.\\[\\]]+'|malformed YAML)")))
        << c.name << ": " << msg;
    EXPECT_NE(msg.find(path + c.expected), std::string::npos) << c.name << ": " << msg;
  }
}
