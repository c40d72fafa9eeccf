// The collectives' fit (calibration::fit_collectives): synthetic data-parallel
// traces replayed by SimGrid on a hardware whose collective link and cores
// are known give them back (a reduction beside compute on shared cores
// slowed, as its rounds' work shares them), and tensor-parallel runs their
// group's rounds; without parallel runs nothing changes.
#include <gtest/gtest.h>

#include <algorithm>

#include <map>
#include <string>
#include <vector>

#include "calibration/fit.hpp"
#include "calibration/fit_parts.hpp"
#include "calibration/traces.hpp"
#include "models/collectives.hpp"
#include "models/hardware.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "models/summary.hpp"
#include "schedule/error.hpp"
#include "sim/simulator.hpp"
#include "tests/calibration/synthetic.hpp"

namespace pc = pipetwin::calibration;
namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

using pipetwin::test::known_hardware;

struct Config {
  std::string schedule;
  int microbatches, batch;
  std::vector<ps::LayerRange> partition;
  bool zero1;
};

// Three D = 2 runs whose stages reduce three sizes of gradients: one rank
// (the whole model), two ranks split in half, two ranks with the embedding
// alone on the first (ZeRO-1: D - 1 rounds).
const std::vector<Config> kConfigs{
    {"gpipe", 2, 8, {{0, 6}}, false},
    {"gpipe", 4, 16, {{0, 3}, {3, 6}}, false},
    {"1f1b", 4, 16, {{0, 1}, {1, 6}}, true},
};

std::vector<pc::TraceRun> data_parallel_runs(const pm::Hardware& hw) {
  std::vector<pc::TraceRun> runs;
  for (std::size_t i = 0; i < kConfigs.size(); ++i) {
    const Config& c = kConfigs[i];
    auto trace = pipetwin::test::synthetic_trace(c.schedule, c.microbatches, c.batch, "none", c.partition, hw, true, 2,
                                                 c.zero1);
    runs.push_back(pc::trace_run_from(std::move(trace), "d2_" + std::to_string(i) + ".json"));
  }
  return runs;
}

// A traced configuration replayed by SimGrid on `hw`, as twin::replay does.
ps::Timeline replay(const pc::TraceRun& run, const pm::Hardware& hw) {
  pm::PartitionRequest r;
  r.program = run.program;
  r.microbatch_size = run.microbatch_size;
  r.optimizer = run.optimizer;
  r.collective = run.collective;
  const pm::StageCostModel costs(run.model, hw, r);
  return pipetwin::sim::simulate({run.program, pm::stage_table(costs, hw, run.program), hw.topology}).timeline;
}

// One process's STEP all-gathers over D = 2 (one round of a part per call)
// on a link of 35 µs and 1.7 GB/s, as the executor records them.
pc::TraceRun::Exchanges gathered(double calls, double part) {
  return pc::TraceRun::Exchanges{calls, calls * (35e-6 + part / 1.7e9), calls * part};
}

// The truth with its collectives forgotten: what the fit starts from.
pc::FitResult forgetting_collectives(const pm::Hardware& truth) {
  pc::FitResult fit;
  fit.hardware = truth;
  fit.hardware.topology.collective = {};
  return fit;
}

TEST(FitCollectives, TheCollectiveLinkIsRecoveredFromTheReductionsThatRanAlone) {
  pm::Hardware truth = known_hardware();  // eight cores: nothing shares one
  truth.topology.collective = {35e-6, 1.7e9};
  const auto runs = data_parallel_runs(truth);
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay);
  const pm::Topology& t = fit.hardware.topology;
  EXPECT_NEAR(t.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(t.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  // Every reduction, the ones beside another rank's compute too, as replayed.
  const auto& r = fit.residuals.at("reduce_grad");
  EXPECT_EQ(r.count, 5);  // 1 + 2 + 2 (run, stage) reductions
  EXPECT_LT(r.max_rel, 1e-6);
}

// A ZeRO-3 run's REDUCE_GRAD times the reduce-scatters still in flight when
// it is posted, and a bucketed run's the buckets still in flight (here a
// third of a whole ring's time): fitted as rings of the stage's gradients
// they would pull the link's speed up. They are left out, with a note, and
// the link is recovered from the others as before.
TEST(FitCollectives, ReductionsInPiecesAreNotFittedAsRings) {
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  auto runs = data_parallel_runs(truth);
  pc::TraceRun zero3 = runs.back();
  zero3.program.zero = 3;
  for (auto& rank : zero3.trace.timeline.ranks) {
    for (auto& a : rank) {
      if (a.action.op == ps::Op::REDUCE_GRAD) a.end = a.start + (a.end - a.start) / 3;
    }
  }
  pc::TraceRun bucketed = zero3;
  bucketed.program.zero = 0;
  bucketed.bucketed = true;
  runs.push_back(std::move(zero3));
  runs.push_back(std::move(bucketed));
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay);
  EXPECT_NEAR(fit.hardware.topology.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(fit.hardware.topology.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  EXPECT_EQ(fit.residuals.at("reduce_grad").count, 5) << "the two runs' reductions are not among them";
  const bool noted = std::any_of(fit.notes.begin(), fit.notes.end(), [](const std::string& n) {
    return n.find("2 run(s) reduce their gradients in pieces") != std::string::npos;
  });
  EXPECT_TRUE(noted);
}

TEST(FitCollectives, OnSharedCoresAReductionBesideComputeTakesLongerAndTheLinkIsStillRecovered) {
  // Four processes (K = 2, D = 2) on two cores: the last stage's reduction
  // runs while the first stage computes its last backwards, its rounds' work
  // sharing the cores with them; the first stage's runs alone.
  pm::Hardware truth = known_hardware();
  truth.topology.host_cores = 2;
  truth.topology.collective = {35e-6, 1.7e9};
  const auto runs = data_parallel_runs(truth);
  const pc::TraceRun& k2 = runs[1];
  std::map<int, double> took;
  for (const auto& rank : k2.trace.timeline.ranks) {
    for (const auto& a : rank) {
      if (a.action.op == ps::Op::REDUCE_GRAD) took[a.action.stage.value] = a.end - a.start;
    }
  }
  const double chunk0 = pipetwin::calibration::fitting::weight_bytes(k2, 0) / 2;
  const double chunk1 = pipetwin::calibration::fitting::weight_bytes(k2, 1) / 2;
  EXPECT_NEAR(took.at(0), 2 * truth.topology.collective.seconds(chunk0), 1e-9);
  EXPECT_GT(took.at(1), 2 * truth.topology.collective.seconds(chunk1) * 1.05);
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay);
  EXPECT_NEAR(fit.hardware.topology.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(fit.hardware.topology.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  // The replay on the fitted link gives back every reduction, the slowed one too.
  EXPECT_LT(fit.residuals.at("reduce_grad").max_rel, 1e-6);
}

std::vector<pc::TraceRun> tensor_parallel_runs(const pm::Hardware& hw) {
  std::vector<pc::TraceRun> runs;
  for (const int K : {1, 2}) {
    for (const int M : {2, 4}) {
      const std::vector<ps::LayerRange> split = K == 1 ? std::vector<ps::LayerRange>{{0, 6}}
                                                       : std::vector<ps::LayerRange>{{0, 3}, {3, 6}};
      auto trace = pipetwin::test::synthetic_trace("1f1b", M, 16, "none", split, hw, true, 1, false, 2);
      runs.push_back(pc::trace_run_from(std::move(trace), "t2_k" + std::to_string(K) + "_m" + std::to_string(M) + ".json"));
    }
  }
  return runs;
}

// Per rank, the seconds a run's actions spend in the tensor group's
// collectives on `hw`, as twin::calibrate computes them.
std::vector<double> tensor_share(const pc::TraceRun& run, const pm::Hardware& hw) {
  pm::PartitionRequest r;
  r.program = run.program;
  r.microbatch_size = run.microbatch_size;
  r.optimizer = run.optimizer;
  r.collective = run.collective;
  return pm::tp_collective_per_rank(run.program, pm::StageCostModel(run.model, hw, r));
}

int coefficients_named(const pc::FitResult& fit, const std::string& name) {
  int n = 0;
  for (const auto& c : fit.coefficients) n += c.name == name;
  return n;
}

TEST(FitCollectives, TheTensorGroupsRoundsAreRecoveredFromTheirRecordedSeconds) {
  // The tensor group's rounds differ from the data group's: fitted apart, on
  // the seconds each rank recorded (here the truth's), micro-batches of 4
  // and 8 giving two sizes of all-reduce; eight cores, so every process had
  // its own.
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  truth.topology.tensor_collective = {120e-6, 0.3e9};
  truth.topology.tensor_compute = 0.2;  // and each member computes 20% longer than its half of the work
  auto runs = data_parallel_runs(truth);
  for (auto& run : tensor_parallel_runs(truth)) {
    run.tp_collective_s = tensor_share(run, truth);
    ASSERT_GT(run.tp_collective_s.front(), 0);
    runs.push_back(std::move(run));
  }
  pc::FitResult fit = forgetting_collectives(truth);
  fit.hardware.topology.tensor_collective = {};
  pc::fit_collectives(runs, fit, replay, tensor_share);
  const pm::Topology& t = fit.hardware.topology;
  EXPECT_NEAR(t.tensor_collective.latency_s, 120e-6, 1e-6 * 120e-6);
  EXPECT_NEAR(t.tensor_collective.bandwidth, 0.3e9, 1e-6 * 0.3e9);
  EXPECT_NEAR(t.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(t.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  EXPECT_EQ(coefficients_named(fit, "tensor_collective.latency_s"), 1);
  EXPECT_LT(fit.residuals.at("tp_collectives").max_rel, 1e-6);
  EXPECT_EQ(fit.residuals.at("tp_collectives").count, 6);  // 1 + 1 + 2 + 2 ranks
  // Then the members' compute on the replayed steps, the collectives as fitted.
  EXPECT_NEAR(t.tensor_compute, 0.2, 1e-3);
}

TEST(FitCollectives, WithoutRecordedSecondsTheTensorRoundsLatencyComesFromTheSteps) {
  // T = 2 traces that recorded nothing of their collectives: the rounds'
  // latency is fitted on the replayed steps, the bytes' rate is the data
  // group's rounds'.
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  auto runs = data_parallel_runs(truth);
  for (auto& run : tensor_parallel_runs(truth)) runs.push_back(std::move(run));
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay, tensor_share);
  EXPECT_NEAR(fit.hardware.topology.tensor_collective.latency_s, 35e-6, 2e-6);
  EXPECT_NEAR(fit.hardware.topology.tensor_collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  EXPECT_NEAR(fit.hardware.topology.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_EQ(coefficients_named(fit, "tensor_collective.latency_s"), 1);
  EXPECT_EQ(fit.residuals.count("tp_collectives"), 0u);
}

// A T = 2 trace's record: per pipeline rank its members' mean at the
// trace's step; a record without that step refused, naming the field.
TEST(FitCollectives, TheTracesTensorCollectiveSecondsAreTheMembersMeanAtItsStep) {
  auto trace = pipetwin::test::synthetic_trace("1f1b", 2, 16, "none", {{0, 3}, {3, 6}}, known_hardware(), true, 1, false, 2);
  nlohmann::json ranks = nlohmann::json::array();
  const std::vector<std::vector<double>> seconds{{9, 0.10, 0.30}, {9, 0.20, 0.50}, {9, 0.40, 0.70}, {9, 0.60, 0.90}};
  for (int p = 0; p < 4; ++p) {
    ranks.push_back({{"rank", p}, {"pipeline_rank", p / 2}, {"threads", 1}, {"tp_collective_s", seconds[p]}});
  }
  trace.metadata["measured"] = {{"representative_step", 2}, {"ranks", ranks}};
  const auto run = pc::trace_run_from(trace, "t2.json");
  ASSERT_EQ(run.tp_collective_s.size(), 2u);
  EXPECT_DOUBLE_EQ(run.tp_collective_s[0], 0.40);
  EXPECT_DOUBLE_EQ(run.tp_collective_s[1], 0.80);
  trace.metadata["measured"]["representative_step"] = 3;
  try {
    pc::trace_run_from(trace, "t2.json");
    FAIL() << "a record without the trace's step was accepted";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("t2.json: otherData.measured.ranks[0].tp_collective_s"), std::string::npos)
        << e.what();
  }
}

TEST(FitCollectives, PipelineRunsAloneLeaveTheHardwareAsItWas) {
  const pm::Hardware truth = known_hardware();
  auto trace = pipetwin::test::synthetic_trace("1f1b", 4, 16, "none", {{0, 3}, {3, 6}}, truth);
  const std::vector<pc::TraceRun> runs{pc::trace_run_from(std::move(trace), "k2.json")};
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay);
  EXPECT_EQ(fit.hardware.topology, truth.topology);
  EXPECT_TRUE(fit.coefficients.empty());
  EXPECT_EQ(fit.residuals.count("reduce_grad"), 0u);
}

TEST(FitCollectives, TheCalibratedFileKeepsTheCollectives) {
  pm::Hardware hw = known_hardware();
  hw.topology.collective = {35e-6, 1.7e9};
  hw.topology.tensor_collective = {120e-6, 0.3e9};
  const std::string text = pm::hardware_to_yaml(hw);
  const pm::Hardware back = pm::hardware_from_yaml(pm::YamlFields(pm::parse_yaml(text, "hw.yaml"), "hw.yaml"));
  EXPECT_EQ(back.topology.collective, hw.topology.collective);
  EXPECT_EQ(back.topology.tensor_collective, hw.topology.tensor_collective);
  // A collective link without bandwidth is refused, naming the field.
  const std::string bad = text.substr(0, text.find("  collective:")) + "  collective: {latency_us: 3}\n";
  try {
    pm::hardware_from_yaml(pm::YamlFields(pm::parse_yaml(bad, "hw.yaml"), "hw.yaml"));
    FAIL() << "a collective link without bandwidth was accepted";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bandwidth"), std::string::npos) << e.what();
  }
}

}  // namespace

// An expert-parallel run's processes record their all-to-alls per step
// (calls, seconds, bytes): two sizes of exchange made on a known link give
// it back, on the topology's own all_to_all link, which the simulator's
// all-to-all then prices ((E - 1) / E of the bytes at its bandwidth, after
// its latency); that run's REDUCE_GRAD (two reductions, the experts apart)
// stays out of the rings' fit.
TEST(FitCollectives, TheExpertGroupsAllToAllIsRecoveredFromItsRecordedSeconds) {
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  const pm::Link exchange{80e-6, 0.9e9};
  auto runs = data_parallel_runs(truth);
  pc::TraceRun moe = runs.back();
  moe.program.expert_parallel = 2;
  const auto made = [&](double calls, double bytes) {
    return pc::TraceRun::Exchanges{calls, calls * exchange.latency_s + 0.5 * bytes / exchange.bandwidth, bytes};
  };
  moe.all_to_all = {made(24, 98304), made(24, 110000), made(12, 4e6), made(12, 3.5e6)};
  runs.push_back(std::move(moe));
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay);
  const pm::Link& got = fit.hardware.topology.exchange;
  EXPECT_NEAR(got.latency_s, exchange.latency_s, 1e-6 * exchange.latency_s);
  EXPECT_NEAR(got.bandwidth, exchange.bandwidth, 1e-6 * exchange.bandwidth);
  EXPECT_EQ(fit.residuals.at("all_to_all").count, 4);
  EXPECT_NEAR(fit.hardware.topology.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9) << "the rings' fit without that run";
  const auto priced = pm::all_to_all(fit.hardware.topology, 1, 2, 0, 2);
  EXPECT_NEAR(priced.seconds(1e6), 80e-6 + 0.5 * 1e6 / 0.9e9, 1e-9);
  const std::string yaml = pm::hardware_to_yaml(fit.hardware);
  EXPECT_NE(yaml.find("all_to_all:"), std::string::npos) << yaml;
}

// A ZeRO-1 run's processes record their STEPs' all-gathers (calls, seconds,
// the parts' bytes): made on the known link as D - 1 rounds of a part each,
// they join the rings' fit, which still gives the link back, and get
// residuals of their own (zero here).
TEST(FitCollectives, ZeroOnesAllGathersJoinTheRingsFit) {
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  auto runs = data_parallel_runs(truth);
  ASSERT_EQ(runs.back().program.zero, 1);
  runs.back().all_gather = {gathered(1, 2.4e6), gathered(2, 5e5)};
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, replay);
  EXPECT_NEAR(fit.hardware.topology.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(fit.hardware.topology.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  ASSERT_EQ(fit.residuals.count("all_gather"), 1u);
  EXPECT_EQ(fit.residuals.at("all_gather").count, 2);
  EXPECT_LT(fit.residuals.at("all_gather").max_rel, 1e-6);
  EXPECT_EQ(fit.residuals.at("reduce_grad").count, 5) << "the reductions' own residuals unchanged";
  const bool in_fit = std::any_of(fit.notes.begin(), fit.notes.end(), [](const std::string& n) {
    return n.find("fitted on 4 of 7 (run, stage) reductions and (run, process) ZeRO-1/2 all-gathers") != std::string::npos;
  });
  // The 2 reductions that ran alone (as without the gathers) and the 2 gathers, whose processes had a core each.
  EXPECT_TRUE(in_fit) << testing::PrintToString(fit.notes);
}

// ZeRO-2 reduce-scatters its gradients a layer at a time during the
// backwards (its REDUCE_GRAD is no ring of the stage's), but its STEP
// all-gathers each layer's updated weights, one whole ring at a time: a
// ZeRO-2 run alone gives the link back from its gathers, recorded per
// process as calls, seconds and parts' bytes.
TEST(FitCollectives, ZeroTwosAllGathersAloneGiveTheLinkBack) {
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  auto runs = data_parallel_runs(truth);
  pc::TraceRun two = runs.back();
  two.program.zero = 2;
  two.all_gather = {gathered(3, 2.4e6), gathered(5, 4e5)};
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives({two}, fit, replay);
  EXPECT_NEAR(fit.hardware.topology.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(fit.hardware.topology.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  ASSERT_EQ(fit.residuals.count("all_gather"), 1u);
  EXPECT_EQ(fit.residuals.at("all_gather").count, 2);
  EXPECT_LT(fit.residuals.at("all_gather").max_rel, 1e-6);
  EXPECT_EQ(fit.residuals.count("reduce_grad") == 0 || fit.residuals.at("reduce_grad").count == 0, true)
      << "its REDUCE_GRAD is not read as a ring";
  // Without its gathers, nothing to fit the link on.
  two.all_gather.clear();
  pc::FitResult none = forgetting_collectives(truth);
  pc::fit_collectives({two}, none, replay);
  EXPECT_EQ(none.hardware.topology.collective.bandwidth, pm::Link{}.bandwidth);
}

// HSDP: a ZeRO-1 run over D = 4 replicas in shard groups of 2 reduce-scatters
// and gathers inside its group (G - 1 rounds of 1/G of the bytes); the
// group's all-reduce across comes at STEP. Its reductions, made as rings of
// 2, are read as such: the link comes back as from the same run at D = 2.
TEST(FitCollectives, HsdpReductionsAreRingsOfTheShardGroup) {
  pm::Hardware truth = known_hardware();
  truth.topology.collective = {35e-6, 1.7e9};
  auto runs = data_parallel_runs(truth);
  pc::TraceRun& hsdp = runs.back();
  ASSERT_EQ(hsdp.program.zero, 1);
  hsdp.program.data_parallel = 4;
  hsdp.program.shard_group = 2;
  hsdp.all_gather = {{1, 35e-6 + 1e6 / 1.7e9, 1e6}};
  pc::FitResult fit = forgetting_collectives(truth);
  pc::fit_collectives(runs, fit, [](const pc::TraceRun& r, const pm::Hardware& hw) {
    pc::TraceRun as_run = r;
    if (as_run.program.shard_group == 2) {  // its timeline holds 2 replicas' ranks: replay it as made
      as_run.program.data_parallel = 2;
      as_run.program.shard_group = 0;
    }
    return replay(as_run, hw);
  });
  EXPECT_NEAR(fit.hardware.topology.collective.latency_s, 35e-6, 1e-6 * 35e-6);
  EXPECT_NEAR(fit.hardware.topology.collective.bandwidth, 1.7e9, 1e-6 * 1.7e9);
  EXPECT_LT(fit.residuals.at("all_gather").max_rel, 1e-6);
}
