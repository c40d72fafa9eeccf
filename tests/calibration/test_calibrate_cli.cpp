// `pipetwin calibrate` as a user runs it: simulated traces of a known
// hardware in, a hardware file out that simulate reads and that reproduces
// them; bad traces refused with exit code 1 and the file named; one short
// real run calibrated; a model calibrated from its own microbenchmarks alone.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "calibration/traces.hpp"
#include "models/hardware.hpp"
#include "schedule/io.hpp"
#include "tests/support/shell.hpp"

namespace pc = pipetwin::calibration;
namespace pm = pipetwin::models;

namespace {

using pipetwin::test::has;
using pipetwin::test::Result;
using pipetwin::test::run_shell;

Result run(const std::string& args) {
  return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1");
}

class CalibrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_calcli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

const std::string kModel = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";

// A CPU-like host of 8 cores (nothing shared at K <= 4) and its calibrated device.
pm::Hardware known() {
  pm::Hardware h = pm::preset("cpu");
  h.name = "known";
  h.topology.host_cores = 8;
  h.topology.intra = {25e-6, 2e9};
  pm::Device& d = h.device;
  d.op_overhead_s = 0;
  d.transfer_overhead_s = 40e-6;
  d.recv_overhead_s = 30e-6;
  d.step_overhead_s = 150e-6;
  d.memory_bandwidth = 9e9;
  d.action_overhead = {80e-6, 120e-6, {}, {}};
  d.kinds["transformer_block"] = {{0.5, 2e6, {}}, {0.45, 4e6, {}}, {}, {}, false, std::nullopt};
  d.kinds["lm_head"] = {{0.6, 1e6, {}}, {0.55, 2e6, {}}, {}, {}, false, std::nullopt};
  d.kinds["embedding"] = {{0.05, 1e5, {}}, {0.04, 1e5, {}}, {}, {}, false, std::nullopt};
  return h;
}

double step_of(const std::string& json) { return nlohmann::json::parse(json)["summary"]["step_time_s"].get<double>(); }

}  // namespace

TEST_F(CalibrateCli, SimulatedTracesInAHardwareFileOutThatReproducesThem) {
  pipetwin::schedule::write_file_atomic(path("known.yaml"), pm::hardware_to_yaml(known()));
  pm::Hardware base = known();
  base.device.kinds.clear();
  base.name = "base";
  pipetwin::schedule::write_file_atomic(path("base.yaml"), pm::hardware_to_yaml(base));
  struct Config {
    int k, m;
    std::string partition;
  };
  const std::vector<Config> configs{{1, 1, "0:6"},          {1, 4, "0:6"},          {2, 1, "0:3 3:6"},
                                    {2, 4, "0:1 1:6"},      {4, 1, "0:2 2:3 3:4 4:6"}, {4, 4, "0:2 2:3 3:4 4:6"}};
  std::string traces;
  std::vector<double> steps;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto& c = configs[i];
    pipetwin::schedule::write_file_atomic(path("p" + std::to_string(i)), c.partition + "\n");
    const std::string common = "--model " + kModel + " -s gpipe -k " + std::to_string(c.k) + " -m " + std::to_string(c.m) +
                               " --batch 8 --partition " + path("p" + std::to_string(i));
    const auto r = run("simulate " + common + " --hardware " + path("known.yaml") + " --trace " + path("t" + std::to_string(i) + ".json") + " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    steps.push_back(step_of(r.out));
    traces += " " + path("t" + std::to_string(i) + ".json");
  }
  const auto cal = run("calibrate" + traces + " --hardware " + path("base.yaml") + " --out " + path("cal.yaml"));
  ASSERT_EQ(cal.code, 0) << cal.out;
  EXPECT_TRUE(has(cal.out, "calibrated   " + path("cal.yaml"))) << cal.out;
  const std::string text = pipetwin::schedule::read_file(path("cal.yaml"));
  EXPECT_TRUE(has(text, "calibration:")) << text;
  EXPECT_TRUE(has(text, path("t0.json"))) << text;
  // simulate reads it like a preset and reproduces every traced step (to
  // 0.5%: six runs do not tell every overhead apart; the fit's own tests
  // recover them exactly from a larger grid).
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const auto& c = configs[i];
    const auto r = run("simulate --model " + kModel + " -s gpipe -k " + std::to_string(c.k) + " -m " + std::to_string(c.m) +
                       " --batch 8 --partition " + path("p" + std::to_string(i)) + " --hardware " + path("cal.yaml") + " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NEAR(step_of(r.out), steps[i], 5e-3 * steps[i]) << c.k << " " << c.m;
  }
  // A held-out configuration too (another M and schedule).
  const auto a = run("simulate --model " + kModel + " -s 1f1b -k 2 -m 2 --batch 8 --partition " + path("p2") +
                     " --hardware " + path("known.yaml") + " --json");
  const auto b = run("simulate --model " + kModel + " -s 1f1b -k 2 -m 2 --batch 8 --partition " + path("p2") +
                     " --hardware " + path("cal.yaml") + " --json");
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NEAR(step_of(b.out), step_of(a.out), 5e-3 * step_of(a.out));
}

TEST_F(CalibrateCli, BadTracesAreRefusedWithTheFileNamed) {
  const auto sim = run("simulate --model " + kModel + " --hardware cpu -s gpipe -k 2 -m 2 --trace " + path("ok.json"));
  ASSERT_EQ(sim.code, 0) << sim.out;
  const std::string text = pipetwin::schedule::read_file(path("ok.json"));
  pipetwin::schedule::write_file_atomic(path("cut.json"), text.substr(0, text.size() / 3));
  const auto cut = run("calibrate " + path("ok.json") + " " + path("cut.json") + " --hardware cpu --out " + path("x.yaml"));
  EXPECT_EQ(cut.code, 1) << cut.out;
  EXPECT_TRUE(has(cut.out, "pipetwin: error: " + path("cut.json") + ": not a Chrome trace")) << cut.out;
  EXPECT_FALSE(std::filesystem::exists(path("x.yaml")));
  // Another model.
  const auto other = run("simulate --model " + std::string(PIPETWIN_EXAMPLES_DIR) + "/mlp-small.yaml --hardware cpu -s gpipe -k 2 -m 2 --trace " +
                         path("mlp.json"));
  ASSERT_EQ(other.code, 0) << other.out;
  const auto mixed = run("calibrate " + path("ok.json") + " " + path("mlp.json") + " --hardware cpu --out " + path("x.yaml"));
  EXPECT_EQ(mixed.code, 1) << mixed.out;
  EXPECT_TRUE(has(mixed.out, path("mlp.json") + ": its model has model")) << mixed.out;
  EXPECT_TRUE(has(run("calibrate --hardware cpu --out " + path("x.yaml")).out, "give traces")) << "no traces";
}

TEST_F(CalibrateCli, AShortRealRunCalibrates) {
  const std::string tiny = std::string(PIPETWIN_TEST_MODELS) + "/tiny-transformer.yaml";
  const auto r = run("run --model " + tiny + " -s 1f1b -k 2 -m 2 --steps 2 --threads 1 --trace " + path("real.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto cal = run("calibrate " + path("real.json") + " --hardware cpu --out " + path("real.yaml"));
  ASSERT_EQ(cal.code, 0) << cal.out;
  const auto h = pm::load_hardware(path("real.yaml"));
  EXPECT_FALSE(h.device.kinds.empty());
  // Each rank recorded the cores its process may run on, and the calibrated
  // host has them (the cpu preset's 2 are the base's, not this machine's).
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const auto trace = nlohmann::json::parse(pipetwin::schedule::read_file(path("real.json")));
  for (const auto& rank : trace["otherData"]["measured"]["ranks"]) {
    EXPECT_EQ(rank.at("host_cores").template get<int>(), CPU_COUNT(&set));
  }
  EXPECT_EQ(h.topology.host_cores, CPU_COUNT(&set));
  // Every step's bubble is recorded; calibration reads the median of the
  // steps after the first (here the second alone), which is the bubble of
  // the trace's own step (the median one) as read from its events.
  const auto& bubbles = trace["otherData"]["measured"]["bubble_fractions"];
  ASSERT_EQ(bubbles.size(), 2u);
  for (const auto& b : bubbles) {
    EXPECT_GT(b.template get<double>(), 0);
    EXPECT_LT(b.template get<double>(), 1);
  }
  ASSERT_EQ(trace["otherData"]["measured"]["representative_step"].template get<int>(), 1);
  const auto recorded = pc::load_trace_run(path("real.json"));
  EXPECT_EQ(recorded.bubble_steps, 1);
  EXPECT_DOUBLE_EQ(recorded.bubble, bubbles[1].template get<double>());
  auto one_step = trace;
  one_step["otherData"]["measured"].erase("bubble_fractions");
  {
    std::ofstream f(path("one_step.json"));
    f << one_step.dump();
  }
  const auto from_events = pc::load_trace_run(path("one_step.json"));
  EXPECT_EQ(from_events.bubble_steps, 0);
  EXPECT_NEAR(from_events.bubble, recorded.bubble, 1e-6);
  const auto sim = run("simulate --model " + tiny + " -s 1f1b -k 2 -m 2 --hardware " + path("real.yaml"));
  EXPECT_EQ(sim.code, 0) << sim.out;
}

// Real expert-parallel runs (a mixture's experts over E = 2 replicas, at two
// sizes of exchange) and a ZeRO-1 run beside a pipeline run: calibrate fits
// the all-to-all from the seconds each process recorded in its exchanges (4
// records: 2 runs x 2 processes), writes the topology's all_to_all link with
// its residuals, and the file prices an expert-parallel configuration; the
// ZeRO-1 run's two processes' STEP all-gathers join the rings' fit beside its
// reduction, with residuals of their own, and so do a ZeRO-2 run's (a layer
// at a time).
TEST_F(CalibrateCli, ExpertParallelRunsFitTheAllToAll) {
  const std::string moe = std::string(PIPETWIN_TEST_MODELS) + "/tiny-moe.yaml";
  const std::string common = "run --model " + moe + " --optimizer sgd --steps 2 --threads 1 ";
  ASSERT_EQ(run(common + "-s 1f1b -k 2 -m 4 --batch 8 --trace " + path("pp.json")).code, 0);
  for (const int batch : {8, 32}) {
    const auto r = run(common + "-s gpipe -k 1 -m 2 -d 2 -e 2 --batch " + std::to_string(batch) + " --trace " +
                       path("e2_" + std::to_string(batch) + ".json"));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  ASSERT_EQ(run(common + "-s gpipe -k 1 -m 2 -d 2 --zero 1 --batch 8 --trace " + path("z1.json")).code, 0);
  ASSERT_EQ(run(common + "-s gpipe -k 1 -m 2 -d 2 --zero 2 --batch 8 --trace " + path("z2.json")).code, 0);
  const auto cal = run("calibrate " + path("pp.json") + " " + path("e2_8.json") + " " + path("e2_32.json") + " " +
                       path("z1.json") + " " + path("z2.json") + " --hardware cpu --out " + path("moe.yaml"));
  ASSERT_EQ(cal.code, 0) << cal.out;
  EXPECT_TRUE(has(cal.out, "all-to-all: fitted on the recorded seconds of 4 (run, process) step totals of 2")) << cal.out;
  // ZeRO-1's reduction and its 2 processes' gathers; ZeRO-2's 2 processes' gathers (its reductions are by layer).
  EXPECT_TRUE(has(cal.out, "of 5 (run, stage) reductions and (run, process) ZeRO-1/2 all-gathers")) << cal.out;
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("moe.yaml")), "all_gather: {count: 4")) << cal.out;
  const auto h = pm::load_hardware(path("moe.yaml"));
  EXPECT_GT(h.topology.exchange.bandwidth, 0);
  EXPECT_GE(h.topology.exchange.latency_s, 0);
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("moe.yaml")), "all_to_all: {count: 4"));
  const auto sim = run("simulate --model " + moe + " -s gpipe -k 1 -m 2 -d 2 -e 2 --batch 32 --hardware " + path("moe.yaml"));
  EXPECT_EQ(sim.code, 0) << sim.out;
}

TEST_F(CalibrateCli, AModelsOwnMicrobenchmarksAloneCalibrateIt) {
  // No trace given: calibrate runs the model's short runs itself (one and two
  // ranks; on a host of few cores, also twice as many ranks as cores), each
  // twice, interleaved (all of them, then all again), keeps each trace under
  // --microbench-dir, fits them all, and names them in the file.
  const std::string tiny = std::string(PIPETWIN_TEST_MODELS) + "/tiny-transformer.yaml";
  const auto cal = run("calibrate --microbench --microbench-repeats 2 --model " + tiny +
                       " --threads 1 --steps 2 --hardware cpu --microbench-dir " + path("mb") + " --out " + path("mb.yaml"));
  ASSERT_EQ(cal.code, 0) << cal.out;
  std::vector<std::string> names;
  std::istringstream lines(cal.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("microbench ", 0) == 0) names.push_back(line.substr(line.rfind(' ') + 1));
  }
  ASSERT_GE(names.size(), 24u) << cal.out;  // five on one rank, seven on two; twice
  ASSERT_EQ(names.size() % 2, 0u) << cal.out;
  const std::size_t configs = names.size() / 2;
  EXPECT_EQ(names.front(), "k1_mb1_r1");
  // Each half of the layers alone, one micro-batch a step (no action beside another).
  for (const char* serial : {"k2_half_mb2_r1", "k2_half_mb16_r1"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), serial), names.end()) << serial << "\n" << cal.out;
  }
  for (std::size_t i = 0; i < configs; ++i) {
    const std::string base = names[i].substr(0, names[i].size() - 3);
    EXPECT_EQ(names[i], base + "_r1");
    EXPECT_EQ(names[configs + i], base + "_r2");  // the second pass, in the same order
  }
  // The fit reads both runs of each: the noise floor of configurations measured twice.
  EXPECT_TRUE(has(cal.out, std::to_string(names.size()) + " runs of " + std::to_string(configs) +
                               " configuration(s) measured twice or more"))
      << cal.out;
  const std::string written = pipetwin::schedule::read_file(path("mb.yaml"));
  for (const auto& name : names) {
    const std::string trace = path("mb") + "/" + name + ".json";
    const auto recorded = pc::load_trace_run(trace);
    EXPECT_EQ(recorded.model.name, "tiny-transformer") << name;
    EXPECT_TRUE(has(written, trace)) << name;
  }
  const auto h = pm::load_hardware(path("mb.yaml"));
  EXPECT_TRUE(h.device.kinds.count("transformer_block"));
  EXPECT_TRUE(h.device.kinds.count("lm_head"));
  EXPECT_GT(h.device.memory_bandwidth, 0);
  const auto sim = run("simulate --model " + tiny + " -s 1f1b -k 2 -m 2 --hardware " + path("mb.yaml"));
  EXPECT_EQ(sim.code, 0) << sim.out;
}

// mlp-small's microbenchmarks from one pass on a 2-core host (stored under
// data/mlp-microbench): its four-rank runs' actions alone drew the curves of
// their layers after them, round after round, so the slowdown of the
// compute with more ranks than cores ran away (840, a step predicted 5x too
// long). The fit says it cannot tell that slowdown and leaves it at 0.
TEST_F(CalibrateCli, ASlowdownThatTheCurvesFollowIsNotFitted) {
  const std::string data = std::string(PIPETWIN_CALIBRATION_DATA) + "/mlp-microbench/";
  std::string traces;
  for (const char* name : {"k1_mb1", "k1_mb4", "k1_mb16", "k1_mb4_recompute", "k1_mb16_recompute", "k2_first_mb2",
                           "k2_first_mb16", "k2_last_mb2", "k2_last_mb16", "k2_half_mb8_recompute", "k4_shared_1f1b",
                           "k4_shared_gpipe"}) {
    traces += " " + data + name + ".json";
  }
  const auto cal = run("calibrate" + traces + " --hardware cpu --out " + path("mlp.yaml"));
  ASSERT_EQ(cal.code, 0) << cal.out;
  EXPECT_TRUE(has(cal.out, "oversubscribed.compute: 0, not fitted: the curves followed the divided actions")) << cal.out;
  const auto h = pm::load_hardware(path("mlp.yaml"));
  EXPECT_EQ(h.topology.oversubscribed_compute, 0);
  EXPECT_TRUE(h.topology.run_to_completion);  // the sharing is still fitted on the step times
}

// calibrate --runs as a user runs it: a runs CSV in, each run's error and a
// hardware file out that carries its prediction error; the log readers'
// refusals name what is missing.
TEST_F(CalibrateCli, WholeRunsInAFittedHardwareFileOut) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/llama-small.yaml";
  const std::string runs = path("runs.csv");
  std::ofstream(runs) << "name,model,hardware,pipeline,microbatches,microbatch_size,step_s,role\n"
                      << "a," << model << ",h100,1,4,8,0.004,fit\n"
                      << "b," << model << ",h100,2,8,8,0.005,fit\n"
                      << "c: held out #3," << model << ",h100,2,4,8,0.004,predict\n";  // a name YAML must quote
  const auto r = run("calibrate --runs " + runs + " --out " + path("fitted.yaml") + " --json --jobs 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][2]["role"], "predict");
  EXPECT_DOUBLE_EQ(j["runs"][0]["measured_step_s"].get<double>(), 0.004);
  EXPECT_GT(j["runs"][2]["predicted_step_s"].get<double>(), 0);
  EXPECT_TRUE(j["leave_one_out"].contains("worst_error"));
  const std::string text = pipetwin::schedule::read_file(path("fitted.yaml"));
  EXPECT_TRUE(has(text, "calibration:\n  prediction_error: ")) << text;
  const auto hw = pm::load_hardware(path("fitted.yaml"));
  ASSERT_TRUE(hw.prediction_error.has_value());
  EXPECT_GE(*hw.prediction_error, j["predicted"]["worst_error"].get<double>());
  // The text: one line a run, then the medians.
  const auto t = run("calibrate --runs " + runs + " --jobs 2");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_TRUE(has(t.out, "predicted runs: median error")) << t.out;
  // Refusals.
  const std::string data = PIPETWIN_CALIBRATION_DATA;
  const auto no_model = run("calibrate --torchtitan " + data + "/torchtitan-llama3-8b.toml " + data +
                            "/torchtitan-llama3-8b.log --hardware h100 --fit x");
  EXPECT_EQ(no_model.code, 1) << no_model.out;
  EXPECT_TRUE(has(no_model.out, "--torchtitan needs --model")) << no_model.out;
  const auto no_hw = run("calibrate --runs " + data + "/megatron-gpt-1.7b.log --fit x");
  EXPECT_EQ(no_hw.code, 1) << no_hw.out;
  EXPECT_TRUE(has(no_hw.out, "give --hardware")) << no_hw.out;
  const auto both = run("calibrate " + path("t.json") + " --runs " + runs);
  EXPECT_EQ(both.code, 1) << both.out;
  EXPECT_TRUE(has(both.out, "give no traces and no --microbench with it")) << both.out;
}
