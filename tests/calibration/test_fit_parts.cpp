// The parts of the calibration fit (calibration/fit_parts.hpp), one test
// each, on synthetic traces: the timed evaluator's (or SimGrid's) timelines
// of a known hardware, as test_fit.cpp makes them. Each part recovers the
// parameters it fits on its own, from the observations the others hand it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "calibration/fit.hpp"
#include "calibration/fit_parts.hpp"
#include "calibration/noise.hpp"
#include "calibration/traces.hpp"
#include "models/families.hpp"
#include "models/yaml_file.hpp"
#include "schedule/io.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "sim/simulator.hpp"
#include "tests/calibration/synthetic.hpp"

namespace pc = pipetwin::calibration;
namespace pf = pipetwin::calibration::fitting;
namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

using pipetwin::test::known_hardware;
using pipetwin::test::kModel;

pm::Hardware cpu_base(int cores) {
  pm::Hardware b = pm::preset("cpu");
  b.topology.host_cores = cores;
  return b;
}

struct Config {
  std::string schedule;
  int microbatches, batch;
  std::string recompute;
  std::vector<ps::LayerRange> partition;
};

// Partitions of one to four stages, micro-batch sizes 1, 2 and 4, with and without recompute.
std::vector<Config> grid() {
  const std::vector<std::vector<ps::LayerRange>> partitions{
      {{0, 6}}, {{0, 1}, {1, 6}}, {{0, 3}, {3, 6}}, {{0, 5}, {5, 6}}, {{0, 2}, {2, 4}, {4, 6}}, {{0, 2}, {2, 3}, {3, 4}, {4, 6}}};
  std::vector<Config> out;
  for (const auto& p : partitions) {
    for (const int mb : {1, 2, 4}) {
      out.push_back({"1f1b", 4, 4 * mb, "none", p});
      out.push_back({"gpipe", 2, 2 * mb, "full", p});
    }
  }
  return out;
}

// The evaluator's timeline of `c` on `hw` (SimGrid's with `simgrid`), read
// back as a trace run.
pc::TraceRun synthetic_run(const Config& c, const pm::Hardware& hw, int index, bool simgrid = false) {
  return pc::trace_run_from(pipetwin::test::synthetic_trace(c.schedule, c.microbatches, c.batch, c.recompute, c.partition, hw, simgrid),
                            "synthetic" + std::to_string(index) + ".json");
}

std::vector<pc::TraceRun> runs_of(const std::vector<Config>& configs, const pm::Hardware& hw, bool simgrid = false) {
  std::vector<pc::TraceRun> runs;
  for (const auto& c : configs) runs.push_back(synthetic_run(c, hw, static_cast<int>(runs.size()), simgrid));
  return runs;
}

// The inputs fit() hands its parts: every run's transfers fitted.
pf::Inputs inputs_of(const std::vector<pc::TraceRun>& runs, const pm::Hardware& base) {
  pf::Inputs in{runs, base, {}, false};
  for (const auto& run : runs) {
    if (!in.shared(run)) in.unshared.push_back(&run);
  }
  in.all_shared = in.unshared.empty();
  return in;
}

void expect_rel(double got, double want, const std::string& what) { EXPECT_NEAR(got, want, 1e-6 * std::abs(want)) << what; }

const pc::Coefficient* coefficient(const std::vector<pc::Coefficient>& all, const std::string& name) {
  for (const auto& c : all) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

}  // namespace

TEST(FitObservations, AloneActionsArePacedAndTheirMediansGrouped) {
  // Two ranks: rank 0 computes on [0, 2] and [2.5, 3], rank 1 on [1, 4]; a send in between.
  ps::Timeline t;
  t.ranks = {{{ps::make_action(ps::Op::F, 0, 0), 0, 2},
              {ps::make_action(ps::Op::SEND_F, 0, 0), 2, 2.2},
              {ps::make_action(ps::Op::F, 0, 1), 2.5, 3}},
             {{ps::make_action(ps::Op::F, 1, 0), 1, 4}}};
  const ps::Timeline paced = pf::paced(t);
  EXPECT_EQ(paced.ranks[0][0].end, 2);    // the next action starts at its end
  EXPECT_EQ(paced.ranks[0][1].end, 2.5);  // the gap belongs to the send
  EXPECT_EQ(paced.ranks[1][0].end, 4);
  const auto shared = pf::concurrent_time(t);
  EXPECT_DOUBLE_EQ(shared[0][0], 1.0);  // [1, 2] beside rank 1
  EXPECT_EQ(shared[0][1], 0.0);         // a send does not compute
  EXPECT_DOUBLE_EQ(shared[0][2], 0.5);
  EXPECT_DOUBLE_EQ(shared[1][0], 1.5);

  // One rank, nothing shared: a forward and a backward group per run, the
  // step, and the first forward's extra over the others: its weights' cold read.
  const pm::Hardware truth = known_hardware();
  const auto runs = runs_of({{"1f1b", 4, 8, "none", {{0, 6}}}, {"1f1b", 4, 16, "none", {{0, 6}}}}, truth);
  const pf::Observations obs = pf::compute_observations(runs, false);
  EXPECT_EQ(obs.shared_actions, 0);
  EXPECT_EQ(obs.compute.size(), 4u);
  EXPECT_EQ(obs.steps.size(), 2u);
  ASSERT_EQ(obs.cold.size(), 2u);
  for (const auto& c : obs.cold) {
    EXPECT_EQ(c.bytes, pf::weight_bytes(*c.run, 0));
    expect_rel(c.extra, c.bytes / truth.device.cold_weights_bandwidth, "first forward's extra");
  }
  EXPECT_EQ(pf::partition_text(runs[0].program.partition, ", "), "0:6");
}

TEST(FitCompute, TheCurvesOfEveryKindAndPassAreRecovered) {
  const pm::Hardware truth = known_hardware();
  const auto runs = runs_of(grid(), truth);
  const pm::Model& model = runs.front().model;
  const auto kinds = pf::kinds_by_work(model);
  ASSERT_EQ(kinds.front(), "transformer_block");
  const double peak = truth.device.peak_flops(model.precision);
  const pf::ComputeFit cf = pf::fit_compute(pf::compute_observations(runs, true), kinds, peak);
  // t = a w + b per layer, a = 1 / (max peak), b = half a.
  for (const auto& [kind, k] : truth.device.kinds) {
    for (const pm::Pass pass : {pm::Pass::Forward, pm::Pass::Backward, pm::Pass::ForwardNoGrad, pm::Pass::Recompute}) {
      const pm::Efficiency& e = k.of(pass);
      const auto ab = cf.curves.at(pass).at(kind);
      const std::string what = kind + " " + std::string(pm::pass_name(pass));
      expect_rel(ab.first, 1 / (e.max * peak), what + " slope");
      expect_rel(ab.second, e.half_flops / (e.max * peak), what + " per layer");
    }
  }
  for (const pm::Pass pass : pm::kPasses) {
    expect_rel(cf.action.at(pass), truth.device.action_overhead.of(pass), "action " + std::string(pm::pass_name(pass)));
  }
  EXPECT_EQ(cf.fastest, peak);  // no kind beyond the peak
  EXPECT_LT(cf.loss, 1e-12);
  // Each group, predicted by the curves, is its measurement.
  for (const auto& g : pf::compute_observations(runs, true).compute) {
    if (g.cold_bytes == 0) expect_rel(pf::group_seconds(cf, g), g.measured, "group");
  }
}

TEST(FitCompute, WeightsStreamedInEachPassAreToldApartWhereAKindsLayersDifferInSize) {
  // A ResNet's blocks grow from 74 K to 4.7 M weights over the same FLOPs:
  // partitions that put early and late blocks on different stages tell the
  // time per weight byte from the time per layer.
  const std::string resnet =
      "family: resnet\nname: resnet-small\nimage: 32\nin_channels: 3\nstem_channels: 64\nstages: [2, 2, 2, 2]\n"
      "classes: 10\nprecision: fp32\n";
  pm::Hardware truth = known_hardware();
  truth.device.kinds.clear();
  truth.device.kinds["conv"] = {{0.15, 2e6, {}}, {0.4, 3e6, {}}, std::nullopt, std::nullopt};
  truth.device.kinds["residual_block"] = {{0.8, 4e7, {}}, {0.7, 9e7, {}}, std::nullopt, std::nullopt};
  truth.device.kinds["classifier_head"] = {{0.03, 1e6, {}}, {0.09, 2e6, {}}, std::nullopt, std::nullopt};
  truth.device.weight_stream = {1 / 9e9, 1 / 4e9, {}, {}};
  std::vector<pc::TraceRun> runs;
  for (const std::vector<ps::LayerRange>& p : std::vector<std::vector<ps::LayerRange>>{
           {{0, 10}}, {{0, 5}, {5, 10}}, {{0, 3}, {3, 10}}, {{0, 7}, {7, 10}}, {{0, 1}, {1, 9}, {9, 10}}}) {
    for (const int mb : {1, 2, 4}) {
      runs.push_back(pc::trace_run_from(pipetwin::test::synthetic_trace("gpipe", 2, 2 * mb, "none", p, truth, false, 1,
                                                                        false, 1, resnet),
                                        "resnet" + std::to_string(runs.size()) + ".json"));
    }
  }
  const pm::Model& model = runs.front().model;
  const double peak = truth.device.peak_flops(model.precision);
  const pf::ComputeFit cf = pf::fit_compute(pf::compute_observations(runs, true), pf::kinds_by_work(model), peak);
  expect_rel(cf.stream.at(pm::Pass::Forward), 1 / 9e9, "forward's seconds per weight byte");
  expect_rel(cf.stream.at(pm::Pass::Backward), 1 / 4e9, "backward's seconds per weight byte");
  const pm::Efficiency& e = truth.device.kinds.at("residual_block").backward;
  expect_rel(cf.curves.at(pm::Pass::Backward).at("residual_block").first, 1 / (e.max * peak), "residual_block backward slope");
  for (const auto& g : pf::compute_observations(runs, true).compute) {
    if (g.cold_bytes == 0) expect_rel(pf::group_seconds(cf, g), g.measured, "group");
  }

  // Every run recomputing: the forward takes the recompute's fit, its
  // weights' streaming with it.
  std::vector<pc::TraceRun> recomputing;
  for (const std::vector<ps::LayerRange>& p : std::vector<std::vector<ps::LayerRange>>{
           {{0, 10}}, {{0, 5}, {5, 10}}, {{0, 3}, {3, 10}}, {{0, 7}, {7, 10}}}) {
    for (const int mb : {1, 2, 4}) {
      recomputing.push_back(pc::trace_run_from(
          pipetwin::test::synthetic_trace("gpipe", 2, 2 * mb, "full", p, truth, false, 1, false, 1, resnet),
          "recompute" + std::to_string(recomputing.size()) + ".json"));
    }
  }
  pf::Curves curves;
  curves.kinds = pf::kinds_by_work(model);
  curves.fit = pf::fit_compute(pf::compute_observations(recomputing, true), curves.kinds, peak);
  ASSERT_EQ(curves.fit.stream.count(pm::Pass::Forward), 0u);  // no forward with autograd outside recompute
  pm::Device fitted = truth.device;
  std::vector<std::string> notes;
  pf::set_device_curves(curves, peak, model.precision, fitted, notes);
  expect_rel(fitted.weight_stream.of(pm::Pass::Forward), 1 / 9e9, "forward's streaming, from the recomputes");
  expect_rel(fitted.weight_stream.of(pm::Pass::Recompute), 1 / 9e9, "recompute's streaming");
  expect_rel(fitted.weight_stream.of(pm::Pass::Backward), 1 / 4e9, "backward's streaming, with recompute");

  // transformer-small's blocks are all of one size: a stage's weight bytes
  // are its layers' counts times theirs, and the fixed costs per layer keep
  // that time; the streaming is fixed at 0 and said so.
  const auto plain = runs_of(grid(), known_hardware());
  const pf::ComputeFit same = pf::fit_compute(pf::compute_observations(plain, true),
                                              pf::kinds_by_work(plain.front().model), peak);
  EXPECT_EQ(same.stream.at(pm::Pass::Forward), 0);
  EXPECT_EQ(same.stream.at(pm::Pass::Backward), 0);
  const pc::Coefficient* fixed = coefficient(same.coefficients, "weights.backward.seconds_per_byte");
  ASSERT_NE(fixed, nullptr);
  EXPECT_NE(fixed->how.find("fixed to 0"), std::string::npos) << fixed->how;
}

TEST(FitCompute, AloneActionsGiveTheCurvesAndRunsBeyondTheCoresTheirSlowdown) {
  // Two cores, replayed by SimGrid: ranks computing at once share them, and
  // with three or four ranks every compute action takes 8% longer. The
  // actions that ran alone give the device's curves and first forwards; the
  // runs beyond the cores, the 8%.
  pm::Hardware truth = known_hardware();
  truth.topology.host_cores = 2;
  truth.topology.oversubscribed_compute = 0.08;
  const auto runs = runs_of(grid(), truth, /*simgrid=*/true);
  const pf::Inputs in = inputs_of(runs, cpu_base(2));
  ASSERT_FALSE(in.all_shared);
  const double peak = truth.device.peak_flops(pm::Precision::FP32);
  pm::Device device = in.base.device;
  pc::FitResult result;
  pf::Curves curves = pf::fit_curves(in, peak, device, result);
  EXPECT_NEAR(curves.slower, 0.08, 1e-6);
  expect_rel(device.cold_weights_bandwidth, 9e9, "first forward's weights");
  expect_rel(curves.cold_s_per_byte, 1 / 9e9, "first forward's weights");
  ASSERT_NE(coefficient(result.coefficients, "oversubscribed.compute"), nullptr);
  bool left_out = false;
  for (const auto& n : result.notes) left_out = left_out || n.find("ran while another rank computed") != std::string::npos;
  EXPECT_TRUE(left_out);
  // The device from the curves: the truth's layer times.
  pf::set_device_curves(curves, peak, pm::Precision::FP32, device, result.notes);
  for (const auto& [kind, k] : truth.device.kinds) {
    for (const pm::Pass pass : pm::kPasses) {
      const double w = 1e9;
      expect_rel(device.layer_seconds(kind, pass, w, pm::Precision::FP32),
                 truth.device.layer_seconds(kind, pass, w, pm::Precision::FP32), kind + " " + std::string(pm::pass_name(pass)));
    }
  }
  expect_rel(device.action_overhead.backward_s, 55e-6, "backward action");
}

TEST(FitStep, TheStepOverheadAndMemoryBandwidthAreRecovered) {
  const pm::Hardware truth = known_hardware();
  const auto runs = runs_of(grid(), truth);
  const pm::Hardware base = cpu_base(8);
  pm::Device device = base.device;
  pc::FitResult result;
  pf::fit_step(pf::compute_observations(runs, true).steps, base, device, result);
  expect_rel(*device.step_overhead_s, 230e-6, "step overhead");
  expect_rel(device.memory_bandwidth, 7.5e9, "memory bandwidth");
  ASSERT_NE(coefficient(result.coefficients, "step.seconds_per_byte"), nullptr);
  EXPECT_EQ(coefficient(result.coefficients, "step.seconds_per_byte")->how, "fitted");
  EXPECT_TRUE(result.notes.empty());
  // One partition of one stage: every step updates as many parameters, so
  // the traffic cannot be told from the overhead; the base bandwidth is kept.
  const auto one = runs_of({{"1f1b", 4, 8, "none", {{0, 6}}}}, truth);
  pm::Device kept = base.device;
  pc::FitResult same;
  pf::fit_step(pf::compute_observations(one, true).steps, base, kept, same);
  EXPECT_EQ(kept.memory_bandwidth, base.device.memory_bandwidth);
  EXPECT_EQ(coefficient(same.coefficients, "step.seconds_per_byte")->how.rfind("kept: ", 0), 0u);
  // No steps: the base's cost, and a note.
  pm::Device none = base.device;
  pc::FitResult empty;
  pf::fit_step({}, base, none, empty);
  EXPECT_EQ(none.step_overhead_s, base.device.step_overhead_s);
  ASSERT_EQ(empty.notes.size(), 1u);
  EXPECT_EQ(empty.notes[0].rfind("no STEP actions", 0), 0u);
}

TEST(FitTransfers, TheSendersReceiversAndLinksCostsAreRecovered) {
  const pm::Hardware truth = known_hardware();
  const auto runs = runs_of(grid(), truth);
  const pm::Hardware base = cpu_base(8);
  const pf::Inputs in = inputs_of(runs, base);
  auto links = pf::link_groups(runs, base);
  // A group per (sender stage, direction) of every run of several stages.
  std::size_t expected = 0;
  for (const auto& run : runs) expected += 2 * (run.program.partition.size() - 1);
  EXPECT_EQ(links.size(), expected);
  pm::Device device = base.device;
  pc::FitResult result;
  const pm::Topology topology = pf::fit_transfers(in, links, 0, 0, device, result);
  expect_rel(device.transfer_overhead_s, 17e-6, "send overhead");
  expect_rel(device.send_bandwidth, 0.8e9, "send bandwidth");
  expect_rel(device.recv_overhead_s, 23e-6, "receive overhead");
  expect_rel(device.recv_bandwidth, 1.5e9, "receive bandwidth");
  expect_rel(topology.intra.latency_s, 42e-6, "latency");
  expect_rel(topology.intra.bandwidth, 2.5e9, "bandwidth");
  EXPECT_TRUE(result.notes.empty());
  int waited = 0, arrived = 0;
  for (const auto& g : links) waited += g.waited, arrived += g.arrived;
  EXPECT_GT(waited, 0);
  EXPECT_GT(arrived, 0);
  // Runs with more ranks than cores are left out of the transfers, and said so.
  const pf::Inputs two = inputs_of(runs, cpu_base(2));
  std::vector<std::string> notes;
  pf::note_unfitted_transfers(two, notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0].rfind("12 run(s) with more ranks x threads", 0), 0u) << notes[0];  // the 3- and 4-stage runs
}

TEST(FitReport, ResidualsAgainstTheTrueHardwareAreZeroAndAnOffsetShows) {
  const pm::Hardware truth = known_hardware();
  const auto runs = runs_of(grid(), truth);
  const pf::Inputs in = inputs_of(runs, cpu_base(8));
  auto links = pf::link_groups(runs, in.base);
  pm::Device device = in.base.device;
  pc::FitResult transfers;
  pf::fit_transfers(in, links, 0, 0, device, transfers);  // tells which receives waited and which found their message
  const pf::Observations obs = pf::compute_observations(runs, true);
  const double cold_s_per_byte = 1 / truth.device.cold_weights_bandwidth;
  pc::FitResult exact;
  exact.hardware = truth;
  pf::add_residuals(in, obs, links, cold_s_per_byte, exact);
  EXPECT_EQ(exact.overall.count, exact.observations);
  EXPECT_GT(exact.observations, 100);
  EXPECT_LT(exact.overall.max_rel, 1e-9);
  for (const std::string op : {"forward", "backward", "forward_nograd", "recompute", "step", "send", "transfer", "receive"}) {
    EXPECT_GT(exact.residuals.count(op) ? exact.residuals.at(op).count : 0, 0) << op;
  }
  EXPECT_TRUE(exact.shared_core_residuals.empty());
  // A step overhead 100 us too long: every step 100 us off.
  pc::FitResult offset;
  offset.hardware = truth;
  offset.hardware.device.step_overhead_s = 330e-6;
  pf::add_residuals(in, obs, links, cold_s_per_byte, offset);
  EXPECT_NEAR(offset.residuals.at("step").max_s, 100e-6, 1e-12);
  EXPECT_NEAR(offset.residuals.at("step").rms_s, 100e-6, 1e-12);
  EXPECT_LT(offset.residuals.at("forward").max_rel, 1e-9);
  // The calibration section records them.
  const std::string yaml = pc::calibration_yaml(offset, runs);
  EXPECT_NE(yaml.find("  observations: " + std::to_string(offset.observations) + " "), std::string::npos);
  EXPECT_NE(yaml.find("    step: {count: " + std::to_string(offset.residuals.at("step").count) + ", rms_us: "),
            std::string::npos)
      << yaml;
  // Coefficients that were not fitted are noted.
  offset.coefficients = {{"a", 1, "fitted"}, {"b", 0, "fixed to 0: why"}};
  pf::note_not_fitted(offset);
  ASSERT_EQ(offset.notes.size(), 1u);
  EXPECT_EQ(offset.notes[0], "b: fixed to 0: why");
}

TEST(FitSharing, TheGoldenSectionSearchFindsTheMinimumOrAnEnd) {
  EXPECT_NEAR(pf::golden_min([](double x) { return (x - 0.3) * (x - 0.3); }, 0, 1, 1e-6), 0.3, 1e-5);
  EXPECT_EQ(pf::golden_min([](double x) { return -x; }, 1, 4, 1e-3), 4);  // the boundary: falling all the way
  EXPECT_EQ(pf::golden_min([](double x) { return x; }, 1, 4, 1e-3), 1);
  // Two valleys, the deeper one away from the middle, where the golden-section
  // search alone goes: the scan finds it.
  const auto valleys = [](double x) { return std::min((x - 0.5) * (x - 0.5) + 0.1, 4 * (x - 2.6) * (x - 2.6)); };
  EXPECT_GT(std::abs(pf::golden_min(valleys, 0, 3, 1e-6) - 2.6), 0.5);
  EXPECT_NEAR(pf::scan_min(valleys, 0, 3, 1e-6, 13), 2.6, 1e-5);
  EXPECT_EQ(pf::scan_min([](double x) { return -x; }, 1, 4, 1e-3, 13), 4);
  EXPECT_EQ(pf::scan_min([](double x) { return x; }, 1, 4, 1e-3, 13), 1);
  // Each point once (each is a replay of every run), and the minimum handed
  // back: the scan's grid, the golden-section search's bracket ends (grid
  // points) and its answer are not evaluated again.
  std::map<double, int> calls;
  double least = -1;
  const double at = pf::scan_min(
      [&](double x) {
        ++calls[x];
        return valleys(x);
      },
      0, 3, 1e-6, 13, &least);
  EXPECT_NEAR(at, 2.6, 1e-5);
  EXPECT_EQ(least, valleys(at));
  for (const auto& [x, n] : calls) EXPECT_EQ(n, 1) << "f(" << x << ") evaluated " << n << " times";
  calls.clear();
  EXPECT_EQ(pf::golden_min([&](double x) { return ++calls[x], -x; }, 1, 4, 1e-3), 4);
  for (const auto& [x, n] : calls) EXPECT_EQ(n, 1) << "f(" << x << ") evaluated " << n << " times";
  // fit_sharing does nothing but on a shared host.
  pc::FitResult fit;
  fit.hardware = pm::preset("a100");
  const auto runs = runs_of({{"1f1b", 4, 8, "none", {{0, 3}, {3, 6}}}}, known_hardware());
  int replays = 0;
  pc::fit_sharing(runs, fit, [&](const pc::TraceRun& r, const pm::Hardware&) {
    ++replays;
    return r.trace.timeline;
  });
  EXPECT_EQ(replays, 0);
  EXPECT_TRUE(fit.coefficients.empty());
}

// DualPipeV's OVERLAP_F_B on a device that hides a share of the shorter half:
// the evaluator's trace of K=2 (4 stages) read back as a run, its program
// recorded; fit_overlap recovers the share from the spans against the halves
// that ran alone (each stage's first forward, which also reads the weights
// cold, left out of those), and keeps the base's where the program holds no
// OVERLAP_F_B, saying so.
TEST(FitOverlap, TheOverlapFactorOfATraceIsRecovered) {
  for (const double rho : {0.0, 0.35, 0.6, 1.0}) {
    pm::Hardware hw = known_hardware();
    ASSERT_GT(hw.device.cold_weights_bandwidth, 0);  // micro-batch 0's forward is longer
    hw.device.overlap_factor = rho;
    const pm::Model model = pm::model_from_yaml(pm::YamlFields(pm::parse_yaml(kModel, "model"), "model"));
    ps::Program p = ps::build_schedule("dualpipe-v", {2, 8, 2});
    p.partition = {{0, 2}, {2, 3}, {3, 4}, {4, 6}};
    pm::PartitionRequest r;
    r.program = p;
    r.microbatch_size = 2;
    const pm::StageCostModel costs(model, hw, r);
    const ps::Timeline timeline = ps::evaluate(p, pm::stage_table(costs, hw, p)).timeline;
    nlohmann::json ranges = nlohmann::json::array();
    for (const auto& range : p.partition) ranges.push_back({range.begin, range.end});
    const nlohmann::json meta{{"producer", "test"},   {"model", model.name}, {"model_spec", kModel}, {"schedule", "dualpipe-v"},
                              {"ranks", 2},           {"stages_per_rank", 2}, {"microbatches", 8},  {"microbatch_size", 2},
                              {"batch", 16},          {"recompute", "none"}, {"partition", ranges}, {"program", ps::to_text(p)}};
    const std::vector<pc::TraceRun> runs{pc::trace_run_from({timeline, meta, {}}, "dualpipe.json")};
    pm::Device device = hw.device;
    device.overlap_factor = 0.123;  // what the fit starts from
    pc::FitResult result;
    pf::fit_overlap(runs, device, result);
    EXPECT_NEAR(device.overlap_factor, rho, 1e-9) << "overlap " << rho;
    ASSERT_FALSE(result.notes.empty());
    EXPECT_NE(result.notes.back().find("overlap_factor "), std::string::npos) << result.notes.back();
    const auto* c = coefficient(result.coefficients, "overlap_factor");
    ASSERT_NE(c, nullptr);
    EXPECT_NEAR(c->value, rho, 1e-9);
  }
  // No OVERLAP_F_B in the traces: the base's factor stays, nothing said.
  pm::Device device = known_hardware().device;
  device.overlap_factor = 0.25;
  pc::FitResult result;
  pf::fit_overlap(runs_of({grid()[0]}, known_hardware()), device, result);
  EXPECT_EQ(device.overlap_factor, 0.25);
  ASSERT_EQ(result.notes.size(), 1u);
  EXPECT_NE(result.notes[0].find("kept from the base hardware: the traces hold no OVERLAP_F_B"), std::string::npos)
      << result.notes[0];
  device.overlap_factor = 0;
  result.notes.clear();
  pf::fit_overlap(runs_of({grid()[0]}, known_hardware()), device, result);
  EXPECT_TRUE(result.notes.empty());
}

// The noise floor of a calibration's step errors: runs of one configuration
// share a prediction, so their errors' spread about their mean is noise.
TEST(NoiseFloor, RepeatsSpreadIsTheFloorAndTheMeansAreTheModels) {
  // a: +10%, +14% (mean +12%); b: -4%, -2%, 0% (mean -2%); c once: +5%.
  const auto f = pc::noise_floor({"a", "a", "b", "b", "b", "c"}, {0.10, 0.14, -0.04, -0.02, 0.0, 0.05});
  EXPECT_EQ(f.configurations, 2);
  EXPECT_EQ(f.runs, 5);
  EXPECT_EQ(f.all_configurations, 3);
  // Within: (0.02^2 x 2) + (0.02^2 + 0 + 0.02^2) over 1 + 2 degrees of freedom.
  EXPECT_NEAR(f.run_sd_rel, std::sqrt(4 * 0.0004 / 3), 1e-12);
  EXPECT_NEAR(f.mean_error_rms_rel, std::sqrt((0.12 * 0.12 + 0.02 * 0.02 + 0.05 * 0.05) / 3), 1e-12);
  EXPECT_NEAR(f.mean_error_worst_rel, 0.12, 1e-12);
  EXPECT_DOUBLE_EQ(f.typical_runs, 2.0);  // the median of 2, 3 and 1 runs
  EXPECT_NE(f.describe().find("5 runs of 2 configuration(s) measured twice or more: a run's step error spreads +-2.3%"),
            std::string::npos)
      << f.describe();
  // Every configuration once: no floor to tell, said by an empty line.
  const auto once = pc::noise_floor({"a", "b"}, {0.1, -0.1});
  EXPECT_EQ(once.configurations, 0);
  EXPECT_EQ(once.describe(), "");
}
