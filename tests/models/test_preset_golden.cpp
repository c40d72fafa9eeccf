// The presets' every field against tests/models/golden/presets.txt, written
// from the presets as code built them before they became files (presets/*.yaml):
// one line per field, doubles to 17 significant digits (exact). A preset
// changed on purpose: PIPETWIN_UPDATE_GOLDEN=1 ctest -R preset_golden.
// The golden holds the presets it held; a new preset needs no line here.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "models/hardware.hpp"
#include "schedule/io.hpp"

namespace pm = pipetwin::models;

namespace {

// Every field of a Hardware as "<prefix><field> <value>" lines.
class Dump {
 public:
  explicit Dump(std::string preset) : preset_(std::move(preset)) {}
  void number(const std::string& key, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    put(key, buf);
  }
  void integer(const std::string& key, long long v) { put(key, std::to_string(v)); }
  void flag(const std::string& key, bool v) { put(key, v ? "true" : "false"); }
  void text(const std::string& key, const std::string& v) { put(key, "\"" + v + "\""); }
  void optional(const std::string& key, const std::optional<double>& v) {
    if (v) number(key, *v);
    else put(key, "none");
  }
  void efficiency(const std::string& key, const pm::Efficiency& e) {
    number(key + ".max", e.max);
    number(key + ".half_flops", e.half_flops);
    integer(key + ".points", static_cast<long long>(e.points.size()));
    for (std::size_t i = 0; i < e.points.size(); ++i) {
      number(key + ".points[" + std::to_string(i) + "].work", e.points[i].first);
      number(key + ".points[" + std::to_string(i) + "].efficiency", e.points[i].second);
    }
  }
  void overheads(const std::string& key, const pm::ActionOverheads& a) {
    number(key + ".forward_s", a.forward_s);
    number(key + ".backward_s", a.backward_s);
    optional(key + ".forward_nograd_s", a.forward_nograd_s);
    optional(key + ".recompute_s", a.recompute_s);
  }
  void link(const std::string& key, const pm::Link& l) {
    number(key + ".latency_s", l.latency_s);
    number(key + ".bandwidth", l.bandwidth);
  }
  void device(const std::string& p, const pm::Device& d) {
    text(p + "name", d.name);
    number(p + "peak_flops_fp32", d.peak_flops_fp32);
    number(p + "peak_flops_half", d.peak_flops_half);
    number(p + "peak_flops_fp8", d.peak_flops_fp8);
    efficiency(p + "efficiency", d.efficiency);
    number(p + "memory_bytes", d.memory_bytes);
    number(p + "memory_bandwidth", d.memory_bandwidth);
    number(p + "memory_efficiency", d.memory_efficiency);
    number(p + "op_overhead_s", d.op_overhead_s);
    number(p + "transfer_overhead_s", d.transfer_overhead_s);
    number(p + "send_bandwidth", d.send_bandwidth);
    flag(p + "blocking_sends", d.blocking_sends);
    number(p + "overlap_factor", d.overlap_factor);
    const auto rates = [&](const std::string& key, const pm::AttentionRates::Curve& c) {
      for (std::size_t i = 0; i < c.size(); ++i) {
        number(p + "attention." + key + "." + std::to_string(i) + ".seq", c[i].first);
        number(p + "attention." + key + "." + std::to_string(i) + ".flops", c[i].second);
      }
    };
    rates("forward", d.attention.forward);
    rates("forward_causal", d.attention.forward_causal);
    rates("backward", d.attention.backward);
    rates("backward_causal", d.attention.backward_causal);
    integer(p + "kinds", static_cast<long long>(d.kinds.size()));
    for (const auto& [kind, c] : d.kinds) {
      efficiency(p + "kinds." + kind + ".forward", c.forward);
      efficiency(p + "kinds." + kind + ".backward", c.backward);
      if (c.forward_nograd) efficiency(p + "kinds." + kind + ".forward_nograd", *c.forward_nograd);
      if (c.recompute) efficiency(p + "kinds." + kind + ".recompute", *c.recompute);
      flag(p + "kinds." + kind + ".per_operator", c.per_operator);
    }
    overheads(p + "action_overhead", d.action_overhead);
    overheads(p + "weight_stream", d.weight_stream);
    optional(p + "step_overhead_s", d.step_overhead_s);
    number(p + "recv_overhead_s", d.recv_overhead_s);
    number(p + "recv_bandwidth", d.recv_bandwidth);
    number(p + "cold_weights_bandwidth", d.cold_weights_bandwidth);
  }
  void topology(const pm::Topology& t) {
    text("topology.kind", std::string(pm::topology_name(t.kind)));
    integer("topology.devices_per_host", t.devices_per_host);
    integer("topology.nics_per_host", t.nics_per_host);
    text("topology.network", std::string(pm::network_name(t.network)));
    integer("topology.nodes_per_leaf", t.nodes_per_leaf);
    number("topology.oversubscription", t.oversubscription);
    integer("topology.devices_per_switch", t.devices_per_switch);
    integer("topology.host_cores", t.host_cores);
    number("topology.effective_cores", t.effective_cores);
    number("topology.oversubscribed_cores", t.oversubscribed_cores);
    number("topology.oversubscribed_send_s", t.oversubscribed_send_s);
    number("topology.oversubscribed_recv_s", t.oversubscribed_recv_s);
    number("topology.full_host_send_s", t.full_host_send_s);
    number("topology.full_host_recv_s", t.full_host_recv_s);
    number("topology.oversubscribed_compute", t.oversubscribed_compute);
    number("topology.oversubscribed_action_s", t.oversubscribed_action_s);
    flag("topology.run_to_completion", t.run_to_completion);
    number("topology.time_slice_s", t.time_slice_s);
    number("topology.wake_preempt_s", t.wake_preempt_s);
    flag("topology.core_affinity", t.core_affinity);
    link("topology.collective", t.collective);
    link("topology.tensor_collective", t.tensor_collective);
    number("topology.tensor_compute", t.tensor_compute);
    link("topology.intra", t.intra);
    link("topology.bridge", t.bridge);
    link("topology.inter", t.inter);
  }
  void hardware(const pm::Hardware& h) {
    text("name", h.name);
    text("source", h.source);
    device("device.", h.device);
    topology(h.topology);
    integer("devices", static_cast<long long>(h.devices.size()));
    for (std::size_t i = 0; i < h.devices.size(); ++i) device("devices[" + std::to_string(i) + "].", h.devices[i]);
  }
  const std::vector<std::pair<std::string, std::string>>& lines() const { return lines_; }
  std::string text() const {
    std::string out;
    for (const auto& [key, value] : lines_) out += preset_ + " " + key + " " + value + "\n";
    return out;
  }

 private:
  void put(const std::string& key, const std::string& value) { lines_.emplace_back(key, value); }
  std::string preset_;
  std::vector<std::pair<std::string, std::string>> lines_;
};

const std::string kGolden = std::string(PIPETWIN_MODELS_GOLDEN_DIR) + "/presets.txt";

// The golden file as preset -> field -> value.
std::map<std::string, std::map<std::string, std::string>> read_golden() {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::istringstream in(pipetwin::schedule::read_file(kGolden));
  std::string line;
  while (std::getline(in, line)) {
    const auto a = line.find(' '), b = line.find(' ', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    out[line.substr(0, a)][line.substr(a + 1, b - a - 1)] = line.substr(b + 1);
  }
  return out;
}

TEST(PresetGolden, EveryFieldIsAsTheGoldenHoldsIt) {
  if (const char* update = std::getenv("PIPETWIN_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::string all;
    for (const auto& name : pm::preset_names()) {
      Dump d(name);
      d.hardware(pm::preset(name));
      all += d.text();
    }
    pipetwin::schedule::write_file_atomic(kGolden, all);
    GTEST_SKIP() << "rewrote " << kGolden;
  }
  const auto golden = read_golden();
  ASSERT_GE(golden.size(), 14u) << kGolden << " is missing or short; run with PIPETWIN_UPDATE_GOLDEN=1";
  for (const auto& [name, fields] : golden) {
    SCOPED_TRACE("preset " + name);
    Dump d(name);
    d.hardware(pm::preset(name));
    EXPECT_EQ(d.lines().size(), fields.size()) << "a different number of fields";
    for (const auto& [key, value] : d.lines()) {
      const auto it = fields.find(key);
      ASSERT_NE(it, fields.end()) << "field " << key << " not in the golden";
      EXPECT_EQ(value, it->second) << "field " << key;
    }
  }
}

}  // namespace
