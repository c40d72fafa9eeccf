// Calibration: the fit recovers the parameters that synthetic traces were made
// with, the calibrated file reproduces those traces, and traces that do not
// fit together are refused with the file named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include "calibration/fit.hpp"
#include "calibration/fit_parts.hpp"
#include "calibration/traces.hpp"
#include "models/families.hpp"
#include "models/hardware.hpp"
#include "models/stage_table.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/trace.hpp"
#include "sim/simulator.hpp"
#include "tests/calibration/synthetic.hpp"

namespace pc = pipetwin::calibration;
namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

using pipetwin::test::known_hardware;
using pipetwin::test::kModel;

struct Config {
  std::string schedule;
  int ranks, microbatches, batch;
  std::string recompute;
  std::vector<ps::LayerRange> partition;
};

std::vector<Config> grid() {
  const std::vector<std::vector<ps::LayerRange>> partitions{
      {{0, 6}}, {{0, 1}, {1, 6}}, {{0, 3}, {3, 6}}, {{0, 5}, {5, 6}}, {{0, 2}, {2, 4}, {4, 6}}, {{0, 2}, {2, 3}, {3, 4}, {4, 6}}};
  std::vector<Config> out;
  int i = 0;
  for (const auto& p : partitions) {
    const int K = static_cast<int>(p.size());
    for (const int mb : {1, 2, 4}) {
      const std::string schedule = ++i % 2 == 0 ? "gpipe" : "1f1b";
      out.push_back({schedule, K, 4, 4 * mb, "none", p});
      out.push_back({schedule, K, 2, 2 * mb, "full", p});
    }
  }
  return out;
}

// The timed evaluator's timeline of `c` on `hw` (SimGrid's with `simgrid`),
// as a trace that stands alone.
ps::Trace synthetic_trace(const Config& c, const pm::Hardware& hw, double* step = nullptr, bool simgrid = false) {
  auto trace = pipetwin::test::synthetic_trace(c.schedule, c.microbatches, c.batch, c.recompute, c.partition, hw, simgrid);
  if (step != nullptr) *step = trace.timeline.makespan();
  return trace;
}

class Calibration : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_cal_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The grid's runs that `keep` selects (all without it) on `hw`, as the
  // timed evaluator gives them (SimGrid's with `simgrid`), written as traces
  // PREFIX0.json, ...; each file's configuration in `configs` where given.
  std::vector<std::string> write_grid(const pm::Hardware& hw, const std::string& prefix = "t", bool simgrid = false,
                                      const std::function<bool(const Config&)>& keep = nullptr,
                                      std::map<std::string, Config>* configs = nullptr) {
    std::vector<std::string> files;
    int i = 0;
    for (const auto& c : grid()) {
      if (keep && !keep(c)) continue;
      files.push_back(path(prefix + std::to_string(i++) + ".json"));
      ps::write_chrome_trace(files.back(), synthetic_trace(c, hw, nullptr, simgrid));
      if (configs != nullptr) (*configs)[files.back()] = c;
    }
    return files;
  }
  static std::vector<pc::TraceRun> load(const std::vector<std::string>& files) {
    std::vector<pc::TraceRun> runs;
    for (const auto& f : files) runs.push_back(pc::load_trace_run(f));
    return runs;
  }
  // The grid's runs on `hw`, written as traces and read back.
  std::vector<pc::TraceRun> grid_runs(const pm::Hardware& hw) { return load(write_grid(hw)); }
  // Those `keep` selects as SimGrid replays them, read back.
  std::vector<pc::TraceRun> simgrid_runs(const pm::Hardware& hw, const std::string& prefix,
                                         std::map<std::string, Config>& configs,
                                         const std::function<bool(const Config&)>& keep = nullptr) {
    return load(write_grid(hw, prefix, /*simgrid=*/true, keep, &configs));
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

// The cpu preset on a host of 8 cores: every run of the grid has a core per rank.
pm::Hardware eight_core_cpu() {
  pm::Hardware base = pm::preset("cpu");
  base.topology.host_cores = 8;
  return base;
}

// The cpu preset on a host of 2 cores: the grid's runs of three and four ranks share them.
pm::Hardware two_core_cpu() {
  pm::Hardware base = pm::preset("cpu");
  base.topology.host_cores = 2;
  return base;
}

// known_hardware() on 2 cores that give ranks computing at once 1.7 cores'
// worth; with more ranks than that, each send waits 300 us and each receive
// 500 us for a core, and each compute action takes `compute` longer and
// `action_s` more.
pm::Hardware four_ranks_on_two_cores(double compute, double action_s) {
  pm::Hardware truth = known_hardware();
  truth.topology.host_cores = 2;
  truth.topology.effective_cores = 1.7;
  truth.topology.oversubscribed_send_s = 300e-6;
  truth.topology.oversubscribed_recv_s = 500e-6;
  truth.topology.oversubscribed_compute = compute;
  truth.topology.oversubscribed_action_s = action_s;
  return truth;
}

void expect_rel(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << what;
}

// Every kind's layer time, in every pass, at works from half the smallest
// micro-batch to twice the largest that the traces ran (1 to 4).
void expect_same_curves(const pm::Device& got, const pm::Device& want) {
  const auto model = pm::model_from_yaml(pm::YamlFields(pm::parse_yaml(kModel, "model"), "model"));
  for (const auto& layer : model.layers) {
    const std::string kind(pm::kind_name(layer.kind));
    for (const pm::Pass pass : pm::kPasses) {
      const double flops = pass == pm::Pass::Backward ? layer.cost.backward_flops() : layer.cost.forward_flops;
      for (const double mb : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0}) {
        expect_rel(got.layer_seconds(kind, pass, flops * mb, pm::Precision::FP32),
                   want.layer_seconds(kind, pass, flops * mb, pm::Precision::FP32),
                   kind + " " + std::string(pm::pass_name(pass)) + " at micro-batch " + std::to_string(mb));
      }
    }
  }
}

}  // namespace

TEST_F(Calibration, FitRecoversTheParametersOfSyntheticTraces) {
  const pm::Hardware truth = known_hardware();
  const auto runs = grid_runs(truth);
  const pm::Hardware base = eight_core_cpu();
  const pc::FitResult fit = pc::fit(runs, base);
  const pm::Device& got = fit.hardware.device;
  const pm::Device& want = truth.device;
  ASSERT_EQ(got.kinds.size(), 4u);  // the model's three and the pooled default
  ASSERT_TRUE(got.kinds.count(std::string(pm::kDefaultKind)));
  expect_same_curves(got, want);
  for (const pm::Pass pass : pm::kPasses) {
    expect_rel(got.action_overhead.of(pass), want.action_overhead.of(pass), "action overhead " + std::string(pm::pass_name(pass)));
  }
  expect_rel(got.step_overhead(), *want.step_overhead_s, "step overhead");
  expect_rel(got.memory_bandwidth, want.memory_bandwidth, "memory bandwidth");
  expect_rel(got.cold_weights_bandwidth, want.cold_weights_bandwidth, "first forward's weights");
  expect_rel(got.transfer_overhead_s, want.transfer_overhead_s, "send overhead");
  expect_rel(got.recv_overhead_s, want.recv_overhead_s, "receive overhead");
  expect_rel(got.send_bandwidth, want.send_bandwidth, "send bandwidth");
  expect_rel(got.recv_bandwidth, want.recv_bandwidth, "receive bandwidth");
  expect_rel(fit.hardware.topology.intra.latency_s, truth.topology.intra.latency_s, "latency");
  expect_rel(fit.hardware.topology.intra.bandwidth, truth.topology.intra.bandwidth, "bandwidth");
  EXPECT_DOUBLE_EQ(got.peak_flops_fp32, want.peak_flops_fp32);  // no kind ran past the peak
  EXPECT_LT(fit.overall.max_rel, 1e-9);
  EXPECT_GT(fit.observations, 100);
  for (const std::string op : {"forward", "backward", "forward_nograd", "recompute", "step", "send", "transfer", "receive"}) {
    EXPECT_GT(fit.residuals.count(op) ? fit.residuals.at(op).count : 0, 0) << op;
  }
  for (const auto& n : fit.notes) {
    EXPECT_TRUE(n.find("tied") == std::string::npos && n.find("fixed") == std::string::npos &&
                n.find("bounded") == std::string::npos)
        << n;
  }
}

TEST_F(Calibration, KindsTheTracesDoNotHoldAreTimedOnTheCurveOfAllKindsPooled) {
  // Every kind on one curve per pass whose fixed cost is per operator (a
  // block's 14, the embedding's 2, the head's 4): the pooled fit (the
  // `default` kind) must recover it, and a kind no trace holds (another
  // model's linear layer, of 1 to 4 operators) is timed on it, where it used
  // to take the base device's curve.
  pm::Hardware truth = known_hardware();
  pm::KindEfficiency common = truth.device.kinds.at("transformer_block");
  common.per_operator = true;
  for (pm::Efficiency* e : {&common.forward, &common.backward}) e->half_flops /= 14;
  common.forward_nograd = common.recompute = std::nullopt;
  truth.device.kinds = {{std::string(pm::kDefaultKind), common}};
  const pm::Model model = pm::model_from_yaml(pm::YamlFields(pm::parse_yaml(kModel, "model"), "model"));
  EXPECT_EQ(pm::operators(model, 0), 2);   // the embedding
  EXPECT_EQ(pm::operators(model, 1), 14);  // a block
  EXPECT_EQ(pm::operators(model, static_cast<int>(model.layers.size()) - 1), 4);  // the head with its loss
  const auto runs = grid_runs(truth);
  const pm::Hardware base = eight_core_cpu();
  const pm::Device got = pc::fit(runs, base).hardware.device;
  ASSERT_TRUE(got.kinds.count(std::string(pm::kDefaultKind)));
  EXPECT_TRUE(got.kinds.at(std::string(pm::kDefaultKind)).per_operator);
  ASSERT_TRUE(got.has_kind("linear"));
  for (const pm::Pass pass : pm::kPasses) {
    for (const double flops : {1e5, 3e6, 4e7, 9e8}) {
      for (const int ops : {1, 2, 4}) {
        expect_rel(got.layer_seconds("linear", pass, flops, pm::Precision::FP32, ops),
                   truth.device.layer_seconds("linear", pass, flops, pm::Precision::FP32, ops),
                   "linear of " + std::to_string(ops) + " operators, " + std::string(pm::pass_name(pass)) + " at " +
                       std::to_string(flops) + " FLOPs");
      }
    }
  }
  // Per layer, as before, the pooled curve would put a block's fixed cost on
  // a linear layer: 14 times its operators' at 1 operator.
  EXPECT_GT(got.layer_seconds("linear", pm::Pass::Forward, 1e5, pm::Precision::FP32, 14),
            5 * got.layer_seconds("linear", pm::Pass::Forward, 1e5, pm::Precision::FP32, 1));
  // A kind the traces hold keeps its own curve, not the pooled one.
  pm::Hardware skewed = known_hardware();
  const auto skewed_runs = grid_runs(skewed);
  const pm::Device fitted = pc::fit(skewed_runs, base).hardware.device;
  expect_same_curves(fitted, skewed.device);
  EXPECT_NE(fitted.layer_seconds("linear", pm::Pass::Forward, 3e6, pm::Precision::FP32),
            fitted.layer_seconds("embedding", pm::Pass::Forward, 3e6, pm::Precision::FP32));
}

TEST_F(Calibration, CalibratedFileLoadsAndReproducesTheTracesStepTimes) {
  const pm::Hardware truth = known_hardware();
  const auto files = write_grid(truth);
  const std::vector<pc::TraceRun> runs = load(files);
  const pm::Hardware base = eight_core_cpu();
  const pc::FitResult fit = pc::fit(runs, base);
  const std::string out = path("calibrated.yaml");
  ps::write_file_atomic(out, pm::hardware_to_yaml(fit.hardware, "test", pc::calibration_yaml(fit, runs)));
  const pm::Hardware loaded = pm::load_hardware(out);
  EXPECT_EQ(loaded.name, "cpu-calibrated");
  EXPECT_EQ(loaded.device.kinds.size(), 4u);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    double step = 0;
    synthetic_trace(grid()[i], loaded, &step);
    EXPECT_NEAR(step, runs[i].step_time_s, 1e-9 * runs[i].step_time_s) << files[i];
  }
  // The calibration section records the files and the residuals.
  const std::string text = ps::read_file(out);
  EXPECT_NE(text.find("fitted_on:"), std::string::npos);
  EXPECT_NE(text.find(files.front()), std::string::npos);
  EXPECT_NE(text.find("residuals:"), std::string::npos);
  EXPECT_NE(text.find("forward_nograd: {count:"), std::string::npos);
}

TEST_F(Calibration, ActionsThatRanAloneGiveTheDeviceAndStepTimesTheSharing) {
  // Two cores that give ranks computing at once 1.7 cores' worth, and make
  // each transfer wait for a core, and each compute action take 8% longer,
  // when four ranks share them, as SimGrid replays it. The actions that ran
  // alone recover the device exactly, whatever the sharing, and the 8%; the
  // step times, replayed, recover the sharing.
  const pm::Hardware truth = four_ranks_on_two_cores(0.08, 0);
  std::map<std::string, Config> configs;
  const std::vector<pc::TraceRun> runs = simgrid_runs(truth, "sg", configs);
  const pm::Hardware base = two_core_cpu();
  pc::FitResult fit = pc::fit(runs, base);
  expect_same_curves(fit.hardware.device, truth.device);
  for (const pm::Pass pass : pm::kPasses) {
    expect_rel(fit.hardware.device.action_overhead.of(pass), truth.device.action_overhead.of(pass),
               "action overhead " + std::string(pm::pass_name(pass)));
  }
  expect_rel(fit.hardware.device.step_overhead(), *truth.device.step_overhead_s, "step overhead");
  expect_rel(fit.hardware.device.cold_weights_bandwidth, truth.device.cold_weights_bandwidth, "first forward's weights");
  EXPECT_NEAR(fit.hardware.topology.oversubscribed_compute, 0.08, 1e-6);
  // The runs with more ranks than cores: their alone actions, as measured,
  // against the curves lengthened by it.
  for (const char* op : {"forward", "backward", "recompute", "step"}) {
    ASSERT_TRUE(fit.shared_core_residuals.count(op)) << op;
    EXPECT_GT(fit.shared_core_residuals.at(op).count, 0) << op;
    EXPECT_LT(fit.shared_core_residuals.at(op).max_rel, 1e-6) << op;
  }
  bool said = false;
  for (const auto& n : fit.notes) said = said || n.find("ran while another rank computed") != std::string::npos;
  EXPECT_TRUE(said);
  // Stage 0 of a two-stage run never computes alone in its backward (its
  // last one overlaps stage 1's optimizer step): the fit says which curves
  // have no row of that stage's own.
  bool named = false;
  for (const auto& n : fit.notes) {
    named = named || n.find("stage 0 of partition [0:3 3:6] (embedding, transformer_block) ran its backward") == 0;
  }
  EXPECT_TRUE(named);
  // The sharing, from a few runs' step times (each replay is a simulation).
  std::vector<pc::TraceRun> some;
  for (const auto& r : runs) {
    const Config& c = configs[r.path];
    if ((c.ranks == 2 || c.ranks == 4) && c.microbatches == 4 && c.batch != 4) some.push_back(r);
  }
  ASSERT_GE(some.size(), 4u);
  pc::fit_sharing(some, fit, [&](const pc::TraceRun& r, const pm::Hardware& hw) {
    return synthetic_trace(configs[r.path], hw, nullptr, /*simgrid=*/true).timeline;
  });
  EXPECT_NEAR(fit.hardware.topology.effective_cores, 1.7, 2e-3);
  EXPECT_NEAR(fit.hardware.topology.oversubscribed_send_s, 300e-6, 1e-6);
  EXPECT_NEAR(fit.hardware.topology.oversubscribed_recv_s, 500e-6, 1e-6);
}

TEST_F(Calibration, OversubscribedActionsLoseAShareOfTheirWorkAndATimeEach) {
  // Four ranks on two cores: each compute action 5% longer and 0.4 ms on
  // top. The grid's runs of three and four ranks hold micro-batches of one,
  // two and four: the fit tells the two apart.
  const pm::Hardware truth = four_ranks_on_two_cores(0.05, 400e-6);
  const pm::Hardware base = two_core_cpu();
  {
    std::map<std::string, Config> configs;
    const pc::FitResult fit = pc::fit(simgrid_runs(truth, "both", configs), base);
    expect_same_curves(fit.hardware.device, truth.device);
    EXPECT_NEAR(fit.hardware.topology.oversubscribed_compute, 0.05, 1e-6);
    EXPECT_NEAR(fit.hardware.topology.oversubscribed_action_s, 400e-6, 1e-9);
    for (const char* op : {"forward", "backward", "recompute"}) {
      ASSERT_TRUE(fit.shared_core_residuals.count(op)) << op;
      EXPECT_LT(fit.shared_core_residuals.at(op).max_rel, 1e-6) << op;
    }
    // And it survives the file.
    const std::string file = path("both.yaml");
    ps::write_file_atomic(file, pm::hardware_to_yaml(fit.hardware));
    EXPECT_NEAR(pm::load_hardware(file).topology.oversubscribed_action_s, 400e-6, 1e-12);
  }
  {
    // Those runs at micro-batches of one only: one size cannot tell a share
    // from a time per action; the fit takes a share (the actions' total over
    // the curves'), no time per action, and its shared actions no longer
    // match exactly.
    std::map<std::string, Config> configs;
    const auto one_size = [](const Config& c) { return c.partition.size() <= 2 || c.batch == c.microbatches; };
    const pc::FitResult fit = pc::fit(simgrid_runs(truth, "one", configs, one_size), base);
    EXPECT_EQ(fit.hardware.topology.oversubscribed_action_s, 0);
    EXPECT_GT(fit.hardware.topology.oversubscribed_compute, 0.05);
    ASSERT_TRUE(fit.shared_core_residuals.count("forward"));
    EXPECT_GT(fit.shared_core_residuals.at("forward").max_rel, 1e-3);
    bool reported = false;
    for (const auto& c : fit.coefficients) reported = reported || (c.name == "oversubscribed.action_s" && c.value == 0);
    EXPECT_TRUE(reported);
  }
}

TEST_F(Calibration, BubblesTellTheTransfersWaitsForACoreFromTheCoresWorth) {
  // Two ranks on two cores that give them 1.8 cores' worth when both compute
  // and make each send wait 400 us and each receive 600 us for a core. Both
  // lengthen the step, only the cores' worth the actions: from waits
  // measured at half that, the replayed steps and bubbles find their scale
  // (2) and the cores' worth together. (Waits alike on every transfer, as
  // here, pc::fit takes for the transfers' own cost; the runs' stalls make
  // the measured means: AsManyRanksAsCoresGiveTheTransfersTheirMeanWait...)
  pm::Hardware truth = known_hardware();
  truth.topology.host_cores = 2;
  truth.topology.effective_cores = 1.8;
  truth.topology.full_host_send_s = 400e-6;
  truth.topology.full_host_recv_s = 600e-6;
  std::map<std::string, Config> configs;
  const std::vector<pc::TraceRun> runs =
      simgrid_runs(truth, "fw", configs, [](const Config& c) { return c.ranks == 2 && c.recompute == "none"; });
  ASSERT_GE(runs.size(), 4u);
  // The device as the fit finds it (as the test above shows), the waits as
  // if measured at half.
  pc::FitResult fit;
  fit.hardware = truth;
  fit.hardware.topology.effective_cores = 0;
  fit.hardware.topology.full_host_send_s = 200e-6;
  fit.hardware.topology.full_host_recv_s = 300e-6;
  const auto replay = [&](const pc::TraceRun& r, const pm::Hardware& hw) {
    return synthetic_trace(configs[r.path], hw, nullptr, /*simgrid=*/true).timeline;
  };
  pc::fit_sharing(runs, fit, replay);
  EXPECT_NEAR(fit.hardware.topology.effective_cores, 1.8, 2e-3);
  EXPECT_NEAR(fit.hardware.topology.full_host_send_s, 400e-6, 1e-9);
  EXPECT_NEAR(fit.hardware.topology.full_host_recv_s, 600e-6, 1e-9);
  const auto scale = std::find_if(fit.coefficients.begin(), fit.coefficients.end(),
                                  [](const auto& c) { return c.name == "full_host.scale"; });
  ASSERT_NE(scale, fit.coefficients.end());
  EXPECT_EQ(scale->value, 2.0);
}

TEST_F(Calibration, StepTimesTellTheCoresWorthOfComputeWithMoreRanksThanCores) {
  // Two cores of which four ranks computing at once get 1.8 cores' worth
  // (each resumes on a core another has just left), with waits for a core on
  // each transfer: four-rank runs at M = 4 and 2 (their waits grow with M,
  // their loss of compute does not), replayed, tell the 1.8 and the waits'
  // scale together, with the way of sharing as calibrate found it on this
  // host (fit_sharing chooses it; the SimGrid replays of that search are
  // slow under the sanitizers).
  pm::Hardware truth = known_hardware();
  truth.topology.host_cores = 2;
  truth.topology.oversubscribed_cores = 1.8;
  truth.topology.run_to_completion = true;
  truth.topology.wake_preempt_s = 0.5e-3;
  truth.topology.core_affinity = true;
  truth.topology.oversubscribed_send_s = 300e-6;
  truth.topology.oversubscribed_recv_s = 500e-6;
  std::map<std::string, Config> configs;
  const auto make = [&](std::vector<pc::TraceRun>& all, std::vector<const pc::TraceRun*>& four) {
    four.clear();
    all = simgrid_runs(truth, "oc", configs);
    for (const auto& r : all) {
      if (configs[r.path].ranks == 4 && configs[r.path].batch == 2 * configs[r.path].microbatches * 2) four.push_back(&r);
    }
  };
  std::vector<pc::TraceRun> all;
  std::vector<const pc::TraceRun*> four;
  make(all, four);
  ASSERT_EQ(four.size(), 2u);
  const pm::Hardware base = two_core_cpu();
  const auto replay = [&](const pc::TraceRun& r, const pm::Hardware& hw) {
    return synthetic_trace(configs[r.path], hw, nullptr, /*simgrid=*/true).timeline;
  };
  const auto with_way = [&](pc::FitResult fit) {
    pm::Topology& t = fit.hardware.topology;
    t.run_to_completion = true, t.wake_preempt_s = 0.5e-3, t.core_affinity = true;
    return fit;
  };
  pc::FitResult fit = with_way(pc::fit(all, base));
  EXPECT_TRUE(pc::fitting::fit_oversubscribed_cores(four, fit, replay));
  const pm::Topology& t = fit.hardware.topology;
  EXPECT_NEAR(t.oversubscribed_cores, 1.8, 1e-9);
  EXPECT_DOUBLE_EQ(t.compute_capacity(2), 2);
  EXPECT_DOUBLE_EQ(t.compute_capacity(4), 1.8);
  // The waits' measured means carry the way's queueing: their scale is what
  // the replays need, and the replayed steps are the runs'.
  for (const auto* r : four) {
    EXPECT_NEAR(replay(*r, fit.hardware).makespan() / r->step_time_s, 1, 5e-3) << r->path;
  }
  // The same runs made with the whole two cores for four ranks: nothing kept,
  // the topology as it was.
  truth.topology.oversubscribed_cores = 0;
  make(all, four);
  pc::FitResult plain = with_way(pc::fit(all, base));
  const pm::Topology before = plain.hardware.topology;
  EXPECT_FALSE(pc::fitting::fit_oversubscribed_cores(four, plain, replay));
  EXPECT_EQ(plain.hardware.topology, before);
  // Each action 4% slower with four ranks, where the lone actions measured
  // 8%: the replayed steps and bubbles keep half.
  truth.topology.oversubscribed_compute = 0.04;
  make(all, four);
  pc::FitResult slower = with_way(pc::fit(all, base));
  slower.hardware.topology.oversubscribed_compute = 0.08;
  EXPECT_DOUBLE_EQ(pc::fitting::fit_compute_share(four, slower, replay), 0.5);
  EXPECT_NEAR(slower.hardware.topology.oversubscribed_compute, 0.04, 1e-12);
}

TEST_F(Calibration, AsManyRanksAsCoresGiveTheTransfersTheirMeanWaitForACore) {
  // Two ranks on two cores: in one run of four (of the grid's two-rank runs)
  // every send waits 2 ms for a core, the rare stall of a transport thread
  // that finds both cores computing. The typical send stays the robust
  // fit's; the mean excess over it is the wait every send gets on average.
  pm::Hardware quiet = known_hardware();
  quiet.topology.host_cores = 2;
  pm::Hardware stalled = quiet;
  stalled.topology.full_host_send_s = 2e-3;
  std::vector<pc::TraceRun> runs;
  int i = 0, two = 0;
  double sends = 0, waited = 0;
  for (const auto& c : grid()) {
    if (c.ranks > 2) continue;
    const bool stall = c.ranks == 2 && two++ % 4 == 0;
    const std::string f = path("full" + std::to_string(i++) + ".json");
    ps::write_chrome_trace(f, synthetic_trace(c, stall ? stalled : quiet));
    runs.push_back(pc::load_trace_run(f));
    for (const auto& rank : runs.back().trace.timeline.ranks) {
      for (const auto& a : rank) {
        if (!ps::is_send(a.action.op)) continue;
        ++sends;
        waited += stall ? 1 : 0;
      }
    }
  }
  ASSERT_GT(waited, 0);
  const pm::Hardware base = two_core_cpu();
  const pc::FitResult fit = pc::fit(runs, base);
  EXPECT_NEAR(fit.hardware.device.transfer_overhead_s, quiet.device.transfer_overhead_s, 2e-6);
  EXPECT_NEAR(fit.hardware.topology.full_host_send_s, 2e-3 * waited / sends, 0.05 * 2e-3 * waited / sends);
  EXPECT_NEAR(fit.hardware.topology.full_host_recv_s, 0, 1e-6);
  // Without a stall, no wait; and none on a host of more cores than ranks.
  std::vector<pc::TraceRun> even;
  for (const auto& c : grid()) {
    if (c.ranks != 2) continue;
    const std::string f = path("even" + std::to_string(i++) + ".json");
    ps::write_chrome_trace(f, synthetic_trace(c, quiet));
    even.push_back(pc::load_trace_run(f));
  }
  EXPECT_NEAR(pc::fit(even, base).hardware.topology.full_host_send_s, 0, 1e-7);
  EXPECT_EQ(pc::fit(runs, eight_core_cpu()).hardware.topology.full_host_send_s, 0);
}

// One way of sharing the cores a test: (time slice, wake preemption, the
// scheduler slice the runs' host recorded, 0 none). Each replays its runs 7
// or 13 x 20 times in SimGrid, the longest tests of the sanitizer pass, so
// CTest runs the four as tests of their own, side by side
// (tests/calibration/CMakeLists.txt).
class TimeSlice : public Calibration, public ::testing::WithParamInterface<std::tuple<double, double, double, bool>> {};

TEST_P(TimeSlice, StepTimesTellTheTimeSliceOfMoreRanksThanCores) {
  // Four ranks on two cores, each kept to the end of its time slice while
  // another waits (round robin), or preempted by a rank woken by a message:
  // the replayed step times and bubbles of runs with more ranks than cores
  // recover that way of sharing, its slice among none (the end of the
  // action) and the host's recorded one, or where none is recorded among
  // none, 16, 8, 4, 2 and 1 ms, its wake preemption, and whether each core
  // queues its own ranks (affinity).
  pm::Hardware truth = known_hardware();
  truth.topology.host_cores = 2;
  truth.topology.run_to_completion = true;
  truth.topology.oversubscribed_send_s = 300e-6;
  truth.topology.oversubscribed_recv_s = 500e-6;
  const auto [slice, wake, recorded, affine] = GetParam();
  truth.topology.time_slice_s = slice;
  truth.topology.wake_preempt_s = wake;
  truth.topology.core_affinity = affine;
  std::vector<pc::TraceRun> runs;
  std::map<std::string, Config> configs;
  int i = 0;
  for (const auto& c : grid()) {
    if (c.ranks != 4 || c.recompute != "none") continue;  // three runs: the fit replays each 25 x 20 times
    const std::string f = path("slice" + std::to_string(i++) + ".json");
    ps::write_chrome_trace(f, synthetic_trace(c, truth, nullptr, /*simgrid=*/true));
    runs.push_back(pc::load_trace_run(f));
    runs.back().sched_slice_s.assign(static_cast<std::size_t>(c.ranks), recorded);
    configs[f] = c;
  }
  ASSERT_GE(runs.size(), 2u);
  EXPECT_EQ(pc::recorded_sched_slice_s(runs), recorded);
  pc::FitResult fit;
  fit.hardware = truth;  // the sharing alone, on the true device and transfer waits
  fit.hardware.topology.run_to_completion = false;
  fit.hardware.topology.time_slice_s = 0;
  fit.hardware.topology.wake_preempt_s = 0;
  pc::fit_sharing(runs, fit, [&](const pc::TraceRun& r, const pm::Hardware& hw) {
    return synthetic_trace(configs[r.path], hw, nullptr, /*simgrid=*/true).timeline;
  });
  EXPECT_TRUE(fit.hardware.topology.run_to_completion) << "slice " << slice;
  EXPECT_EQ(fit.hardware.topology.time_slice_s, slice);
  EXPECT_EQ(fit.hardware.topology.wake_preempt_s, wake) << "slice " << slice;
  EXPECT_EQ(fit.hardware.topology.core_affinity, affine) << "slice " << slice;
  EXPECT_NEAR(fit.hardware.topology.oversubscribed_send_s, 300e-6, 1e-6) << "slice " << slice;
}

// slice, wake preemption, recorded slice, affinity: the third a rank woken
// by a message that takes a core from a running one within 2 ms; the last
// three Linux's slice on two CPUs (EEVDF's 1.5 ms) recorded by the runs,
// which no octave of the fit without it holds; the last with a queue per core.
INSTANTIATE_TEST_SUITE_P(Ways, TimeSlice,
                         ::testing::Values(std::tuple{0.0, 0.0, 0.0, false}, std::tuple{1e-3, 0.0, 0.0, false},
                                           std::tuple{0.0, 2e-3, 1.5e-3, false}, std::tuple{1.5e-3, 0.0, 1.5e-3, false},
                                           std::tuple{1.5e-3, 0.0, 1.5e-3, true}));

TEST_F(Calibration, KindsThatNoPartitionSeparatesAreTiedAndSaidSo) {
  // One rank only: every stage holds every layer, so the kinds' slopes and
  // fixed costs cannot be told apart; the fit still reproduces these runs.
  const pm::Hardware truth = known_hardware();
  std::vector<pc::TraceRun> runs;
  int i = 0;
  for (const auto& c : grid()) {
    if (c.ranks != 1) continue;
    const std::string f = path("k1_" + std::to_string(i++) + ".json");
    ps::write_chrome_trace(f, synthetic_trace(c, truth));
    runs.push_back(pc::load_trace_run(f));
  }
  const pm::Hardware base = eight_core_cpu();
  const pc::FitResult fit = pc::fit(runs, base);
  bool tied = false;
  for (const auto& n : fit.notes) tied = tied || n.find("tied to transformer_block.forward") != std::string::npos;
  EXPECT_TRUE(tied);
  EXPECT_LT(fit.residuals.at("forward").max_rel, 1e-6);
}

// A run measured on a busy machine (its noise record says so) is fitted
// still, and named in the notes with the share others took.
TEST_F(Calibration, ARunMeasuredOnABusyMachineIsNamedInTheNotes) {
  const pm::Hardware truth = known_hardware();
  std::vector<pc::TraceRun> runs = grid_runs(truth);
  ASSERT_GE(runs.size(), 2u);
  runs[1].noise = pc::Noise{};
  runs[1].noise->other_share = 0.25;
  runs[1].noise->counted_steps = 8;
  runs[0].noise = pc::Noise{};  // quiet
  const pm::Hardware base = eight_core_cpu();
  const pc::FitResult fit = pc::fit(runs, base);
  int busy = 0;
  for (const auto& n : fit.notes) {
    if (n.find("measured on a busy machine") == std::string::npos) continue;
    ++busy;
    EXPECT_EQ(n.rfind(runs[1].path + ": ", 0), 0u) << n;
    EXPECT_NE(n.find("other processes took 25.0% of the host's CPU"), std::string::npos) << n;
  }
  EXPECT_EQ(busy, 1);
}

TEST_F(Calibration, ZeroBubbleRunsGiveWsShareOfTheBackward) {
  // The truth's weight gradients take 30% of the backward of every layer
  // with weights, not their FLOPs' share (about half): zero-bubble runs
  // beside the grid, their I + W a backward row (with two actions'
  // overheads) and W's share fitted, one for the kinds they hold; the grid's
  // curves are still found exactly.
  pm::Hardware truth = known_hardware();
  for (const char* kind : {"transformer_block", "lm_head", "embedding"}) truth.device.kinds[kind].weight_grad_share = 0.3;
  std::vector<pc::TraceRun> runs = grid_runs(truth);
  const std::string zb1 = path("zb_h1.json"), zb2 = path("zb_h2.json");
  ps::write_chrome_trace(zb1, synthetic_trace({"zb-h1", 2, 4, 4, "none", {{0, 3}, {3, 6}}}, truth));
  ps::write_chrome_trace(zb2, synthetic_trace({"zb-h2", 2, 4, 8, "none", {{0, 5}, {5, 6}}}, truth));
  runs.push_back(pc::load_trace_run(zb1));
  runs.push_back(pc::load_trace_run(zb2));
  const pc::FitResult fit = pc::fit(runs, eight_core_cpu());
  int said = 0;
  for (const auto& n : fit.notes) {
    if (n.find("I and W actions") == std::string::npos) continue;
    ++said;
    EXPECT_NE(n.find("fit the backward's curve as I + W, and W's share of it per kind"), std::string::npos) << n;
  }
  EXPECT_EQ(said, 2);
  expect_same_curves(fit.hardware.device, truth.device);
  const auto& kinds = fit.hardware.device.kinds;
  for (const char* kind : {"transformer_block", "lm_head"}) {
    ASSERT_TRUE(kinds.at(kind).weight_grad_share.has_value()) << kind;
    EXPECT_NEAR(*kinds.at(kind).weight_grad_share, 0.3, 0.01) << kind;
  }
  // I and W each predicted as measured.
  ASSERT_TRUE(fit.residuals.count("input_grad"));
  ASSERT_TRUE(fit.residuals.count("weight_grad"));
  EXPECT_LT(std::abs(fit.residuals.at("input_grad").max_rel), 0.01);
  EXPECT_LT(std::abs(fit.residuals.at("weight_grad").max_rel), 0.01);
  // Without zero-bubble runs nothing is said of W's share: the FLOPs' split.
  const pc::FitResult plain = pc::fit(grid_runs(truth), eight_core_cpu());
  EXPECT_FALSE(plain.hardware.device.kinds.at("transformer_block").weight_grad_share.has_value());
}

TEST_F(Calibration, TracesThatDoNotFitTogetherAreRefusedNamingTheFile) {
  const pm::Hardware hw = known_hardware();
  const Config c = grid()[8];  // 1f1b, K=2, partition 0:3 3:6
  ASSERT_EQ(c.ranks, 2);
  const ps::Trace good = synthetic_trace(c, hw);
  const std::string ok = path("ok.json");
  ps::write_chrome_trace(ok, good);

  // Another model.
  {
    ps::Trace t = good;
    std::string spec = kModel;
    spec.replace(spec.find("layers: 4"), 9, "layers: 4\n# another\n");
    spec.replace(spec.find("d_ff: 512"), 9, "d_ff: 256");
    t.metadata["model_spec"] = spec;
    const std::string f = path("other_model.json");
    ps::write_chrome_trace(f, t);
    const auto e = error_of([&] { pc::check_together({pc::load_trace_run(ok), pc::load_trace_run(f)}); });
    EXPECT_NE(e.find(f + ": its model has a different layer 1"), std::string::npos) << e;
  }
  // A partition that does not match the model.
  {
    ps::Trace t = good;
    t.metadata["partition"] = {{0, 3}, {3, 5}};
    const std::string f = path("short_partition.json");
    ps::write_chrome_trace(f, t);
    const auto e = error_of([&] { pc::load_trace_run(f); });
    EXPECT_NE(e.find(f + ": otherData.partition ends at layer 5 but model transformer-small has 6 layers"), std::string::npos) << e;
    t.metadata["partition"] = {{0, 3}, {2, 6}};
    ps::write_chrome_trace(f, t);
    EXPECT_NE(error_of([&] { pc::load_trace_run(f); }).find("stage 1 holds layers 2:6"), std::string::npos);
  }
  // A missing rank.
  {
    ps::Trace t = good;
    t.timeline.ranks.pop_back();
    const std::string f = path("missing_rank.json");
    ps::write_chrome_trace(f, t);
    const auto e = error_of([&] { pc::load_trace_run(f); });
    EXPECT_NE(e.find(f + ": rank 1 is missing"), std::string::npos) << e;
  }
  // A missing action.
  {
    ps::Trace t = good;
    t.timeline.ranks[1].erase(t.timeline.ranks[1].begin() + 3);
    const std::string f = path("missing_action.json");
    ps::write_chrome_trace(f, t);
    const auto e = error_of([&] { pc::load_trace_run(f); });
    EXPECT_NE(e.find(f + ": rank 1: action "), std::string::npos) << e;
    EXPECT_NE(e.find("is missing"), std::string::npos) << e;
  }
  // A truncated file.
  {
    const std::string text = ps::read_file(ok);
    const std::string f = path("truncated.json");
    ps::write_file_atomic(f, text.substr(0, text.size() / 2));
    const auto e = error_of([&] { pc::load_trace_run(f); });
    EXPECT_NE(e.find(f + ": not a Chrome trace (invalid or truncated JSON"), std::string::npos) << e;
  }
  // No configuration recorded.
  {
    ps::Trace t = good;
    t.metadata.erase("model_spec");
    const std::string f = path("no_spec.json");
    ps::write_chrome_trace(f, t);
    const auto e = error_of([&] { pc::load_trace_run(f); });
    EXPECT_NE(e.find(f + ": otherData has no 'model_spec'"), std::string::npos) << e;
  }
  // Different thread counts.
  {
    ps::Trace t = good;
    t.metadata["measured"] = {{"ranks", {{{"threads", 1}}, {{"threads", 1}}}}};
    const std::string a = path("threads1.json");
    ps::write_chrome_trace(a, t);
    t.metadata["measured"] = {{"ranks", {{{"threads", 1}}, {{"threads", 2}}}}};
    const std::string b = path("threads2.json");
    ps::write_chrome_trace(b, t);
    const auto e = error_of([&] { pc::check_together({pc::load_trace_run(a), pc::load_trace_run(b)}); });
    EXPECT_NE(e.find(b + ": rank 1 ran with 2 intra-op threads"), std::string::npos) << e;
  }
  // Hosts of different core counts.
  {
    ps::Trace t = good;
    t.metadata["measured"] = {{"ranks", {{{"threads", 1}, {"host_cores", 16}}, {{"threads", 1}, {"host_cores", 16}}}}};
    const std::string a = path("cores16.json");
    ps::write_chrome_trace(a, t);
    t.metadata["measured"] = {{"ranks", {{{"threads", 1}, {"host_cores", 16}}, {{"threads", 1}, {"host_cores", 2}}}}};
    const std::string b = path("cores2.json");
    ps::write_chrome_trace(b, t);
    const std::vector<pc::TraceRun> both{pc::load_trace_run(a), pc::load_trace_run(b)};
    const auto e = error_of([&] { pc::fit(both, pm::preset("cpu")); });
    EXPECT_NE(e.find(b + ": rank 1 ran on a host with 2 usable cores, but " + a + " on one with 16"), std::string::npos) << e;
    // Where the host's cores play no part (GPUs on their links), they are not compared.
    EXPECT_EQ(error_of([&] { pc::fit(both, pm::preset("a100")); }), "(no error)");
    t.metadata["measured"] = {{"ranks", {{{"threads", 1}, {"host_cores", -1}}, {{"threads", 1}}}}};
    const std::string c = path("cores_negative.json");
    ps::write_chrome_trace(c, t);
    const auto n = error_of([&] { pc::load_trace_run(c); });
    EXPECT_NE(n.find(c + ": otherData.measured.ranks[0].host_cores must not be negative"), std::string::npos) << n;
  }
}

TEST_F(Calibration, TheHostsCoresAreTheOnesTheTracesRecorded) {
  // Four ranks measured on a host of 16 cores: none shared a core, whatever
  // the base hardware says (the cpu preset has 2), so the calibrated file has
  // 16 and the runs' transfers are fitted like any others.
  const pm::Hardware truth = known_hardware();
  std::vector<pc::TraceRun> runs;
  int i = 0;
  for (const auto& c : grid()) {
    ps::Trace t = synthetic_trace(c, truth);
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < c.ranks; ++r) ranks.push_back({{"threads", 1}, {"host_cores", 16}, {"host", "box"}});
    t.metadata["measured"] = {{"ranks", ranks}};
    const std::string f = path("h" + std::to_string(i++) + ".json");
    ps::write_chrome_trace(f, t);
    runs.push_back(pc::load_trace_run(f));
  }
  const pm::Hardware base = pm::preset("cpu");
  ASSERT_EQ(base.topology.host_cores, 2);
  const pc::FitResult fit = pc::fit(runs, base);
  EXPECT_EQ(fit.hardware.topology.host_cores, 16);
  bool said = false, shared = false;
  for (const auto& n : fit.notes) {
    said = said || n.find("host_cores 16, as the traces' ranks recorded (the base hardware 'cpu' has 2)") != std::string::npos;
    shared = shared || n.find("more ranks x threads than the host's cores") != std::string::npos;
  }
  EXPECT_TRUE(said);
  EXPECT_FALSE(shared);
  // Written and read back.
  const std::string out = path("calibrated16.yaml");
  ps::write_file_atomic(out, pm::hardware_to_yaml(fit.hardware, "test", pc::calibration_yaml(fit, runs)));
  EXPECT_EQ(pm::load_hardware(out).topology.host_cores, 16);
  // Ranks of one run on two hosts: a shared host cannot replay them, and the
  // fit says so, naming the file.
  const auto multi = std::find_if(runs.begin(), runs.end(), [](const pc::TraceRun& r) { return r.ranks() >= 2; });
  ASSERT_NE(multi, runs.end());
  multi->hosts.back() = "other-box";
  const pc::FitResult two = pc::fit(runs, base);
  bool named = false;
  for (const auto& n : two.notes) named = named || n.find(multi->path + ": its ranks ran on 2 hosts (box, other-box)") == 0;
  EXPECT_TRUE(named);
}

TEST(ReceiverCost, TheEvaluatorAndSimGridAgree) {
  // The receiver's cost of taking a message (a calibrated field) is replayed
  // the same by the fast path and by SimGrid: a receive ends at
  // max(start + that cost, the message's arrival).
  pm::Hardware hw = known_hardware();
  hw.topology.kind = pm::TopologyKind::AllToAll;  // a link per pair: nothing shared
  for (const auto& schedule : {"gpipe", "1f1b"}) {
    const Config c{schedule, 4, 8, 16, "none", {{0, 2}, {2, 3}, {3, 4}, {4, 6}}};
    double fast = 0, simgrid = 0;
    const ps::Trace f = synthetic_trace(c, hw, &fast);
    const ps::Trace s = synthetic_trace(c, hw, &simgrid, /*simgrid=*/true);
    EXPECT_NEAR(fast, simgrid, 1e-9 * fast) << schedule;
    for (std::size_t r = 0; r < f.timeline.ranks.size(); ++r) {
      ASSERT_EQ(f.timeline.ranks[r].size(), s.timeline.ranks[r].size());
      for (std::size_t n = 0; n < f.timeline.ranks[r].size(); ++n) {
        EXPECT_NEAR(f.timeline.ranks[r][n].end, s.timeline.ranks[r][n].end, 1e-9) << schedule << " rank " << r << " #" << n;
      }
    }
    // A receive that finds its message there takes exactly the receiver's cost.
    bool seen = false;
    for (const auto& a : f.timeline.ranks[1]) {
      if (a.action.op == ps::Op::RECV_F && a.end - a.start > 0 &&
          std::abs(a.end - a.start - hw.device.recv_seconds(64 * 128 * 4 * 2)) < 1e-12) {
        seen = true;
      }
    }
    EXPECT_TRUE(seen) << schedule;
    // A receive that started before its message by more than that cost spent
    // it while it waited: it ends with the message's arrival.
    const double bytes = 64 * 128 * 4 * 2, take = hw.device.recv_seconds(bytes);
    int waited = 0;
    for (const auto& a : f.timeline.ranks[0]) {
      if (a.action.op != ps::Op::RECV_B) continue;
      for (const auto& b : f.timeline.ranks[1]) {
        if (b.action.op == ps::Op::SEND_B && b.action.microbatch == a.action.microbatch && a.start + take < b.end) {
          EXPECT_NEAR(a.end, b.end + hw.topology.intra.seconds(bytes), 1e-12) << schedule;
          ++waited;
        }
      }
    }
    EXPECT_GT(waited, 0) << schedule;
  }
}

TEST(SharedHost, EffectiveCoresAndRunToCompletionInSimGrid) {
  // Four ranks on two cores. Effective cores equal to the cores replay as the
  // plain multi-core host. Run to completion: a rank keeps its core until it
  // waits for a message, so never more than two ranks compute, each action
  // at its full-speed duration (a wait for a core comes before the action:
  // idle). With time slices, a rank gives its core up after each slice while
  // another waits: some actions then hold waits (preemptions).
  pm::Hardware hw = known_hardware();
  hw.topology.host_cores = 2;
  const Config c{"1f1b", 4, 8, 16, "none", {{0, 2}, {2, 3}, {3, 4}, {4, 6}}};
  double plain = 0, effective = 0;
  synthetic_trace(c, hw, &plain, /*simgrid=*/true);
  pm::Hardware same = hw;
  same.topology.effective_cores = 2;
  synthetic_trace(c, same, &effective, /*simgrid=*/true);
  EXPECT_NEAR(effective, plain, 1e-9 * plain);
  pm::Hardware fifo = hw;
  fifo.topology.run_to_completion = true;
  double full_speed = 0, queued = 0;
  const ps::Trace alone = synthetic_trace(c, hw, &full_speed);  // the fast path: no sharing at all
  std::map<std::string, double> full;
  for (const auto& rank : alone.timeline.ranks) {
    for (const auto& a : rank) full[ps::to_string(a.action)] = a.end - a.start;
  }
  const ps::Trace t = synthetic_trace(c, fifo, &queued, /*simgrid=*/true);
  EXPECT_GT(queued, full_speed);
  std::vector<std::pair<double, int>> edges;
  for (const auto& rank : t.timeline.ranks) {
    for (const auto& a : rank) {
      if (!ps::is_compute(a.action.op) && a.action.op != ps::Op::STEP) continue;
      EXPECT_NEAR(a.end - a.start, full.at(ps::to_string(a.action)), 1e-9) << ps::to_string(a.action);
      edges.push_back({a.start, +1});
      edges.push_back({a.end, -1});
    }
  }
  std::sort(edges.begin(), edges.end());
  int running = 0, most = 0;
  for (const auto& [time, d] : edges) most = std::max(most, running += d);
  EXPECT_EQ(most, 2);
  // Time slices: no action shorter than at full speed, some longer, another
  // step; slices longer than the whole step change nothing.
  pm::Hardware sliced = fifo;
  sliced.topology.time_slice_s = 0.5e-3;
  double round_robin = 0;
  const ps::Trace rr = synthetic_trace(c, sliced, &round_robin, /*simgrid=*/true);
  EXPECT_GT(std::abs(round_robin - queued), 1e-6);
  int preempted = 0;
  for (const auto& rank : rr.timeline.ranks) {
    for (const auto& a : rank) {
      if (!ps::is_compute(a.action.op)) continue;
      const double d = full.at(ps::to_string(a.action));
      EXPECT_GE(a.end - a.start, d - 1e-9) << ps::to_string(a.action);
      if (a.end - a.start > d + 1e-6) ++preempted;
    }
  }
  EXPECT_GT(preempted, 0);
  sliced.topology.time_slice_s = 10;
  double long_slices = 0;
  synthetic_trace(c, sliced, &long_slices, /*simgrid=*/true);
  EXPECT_NEAR(long_slices, queued, 1e-9 * queued);
}

TEST(SharedHost, ARankWokenByAMessageTakesACoreWithinTheWakePreemption) {
  // Four ranks on two cores, run to completion. With wake preemption, a rank
  // that waited for a message starts its compute within wake_preempt_s of
  // that receive's end (never more woken ranks wait than there are cores:
  // only running ranks hold them), the rank it preempts holding the wait in
  // its action; without, it waits for a running rank's whole action.
  pm::Hardware hw = known_hardware();
  hw.topology.host_cores = 2;
  hw.topology.run_to_completion = true;
  const Config c{"1f1b", 4, 8, 16, "none", {{0, 2}, {2, 3}, {3, 4}, {4, 6}}};
  const double look = 0.2e-3;
  std::map<std::string, double> full;  // each action's time on a core of its own
  for (const auto& rank : synthetic_trace(c, known_hardware()).timeline.ranks) {
    for (const auto& a : rank) full[ps::to_string(a.action)] = a.end - a.start;
  }
  // The longest a compute action that follows a receive started after that receive's end.
  const auto longest_wait = [&](const pm::Hardware& h, int* preempted) {
    const ps::Trace t = synthetic_trace(c, h, nullptr, /*simgrid=*/true);
    double longest = 0;
    for (const auto& rank : t.timeline.ranks) {
      for (std::size_t i = 1; i < rank.size(); ++i) {
        const auto& a = rank[i];
        if (!ps::is_compute(a.action.op)) continue;
        if (a.end - a.start > full.at(ps::to_string(a.action)) + 1e-6) ++*preempted;
        if (ps::is_recv(rank[i - 1].action.op)) longest = std::max(longest, a.start - rank[i - 1].end);
      }
    }
    return longest;
  };
  int kept = 0, preempted = 0;
  EXPECT_GT(longest_wait(hw, &kept), 10 * look);
  EXPECT_EQ(kept, 0);
  pm::Hardware woken = hw;
  woken.topology.wake_preempt_s = look;
  EXPECT_LE(longest_wait(woken, &preempted), look + 1e-9);
  EXPECT_GT(preempted, 0);
}
