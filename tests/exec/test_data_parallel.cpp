// `pipetwin run -t T -d D` across real processes: D data-parallel replicas
// of a K-stage pipeline whose every rank is a group of T tensor-parallel
// processes (Megatron-LM's split of the Transformer's layers), each replica
// on its share of the mini-batch, reducing each stage's gradients over Gloo
// where the IR says REDUCE_GRAD (ZeRO-1: a reduce-scatter, the step on a
// shard, an all-gather). The weights after 3 steps equal one process's run
// of the same global batch, and the measured trace times every reduction.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/shell.hpp"
#include "tests/support/weights.hpp"

namespace fs = std::filesystem;

namespace {

using pipetwin::test::load_weights;
using pipetwin::test::max_difference;
using pipetwin::test::Result;
using pipetwin::test::run_shell;

const std::string kModels = PIPETWIN_TEST_MODELS;
const std::string kMlp = kModels + "/tiny-mlp.yaml";
const std::string kTransformer = kModels + "/tiny-transformer.yaml";

Result run(const std::string& args) { return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1"); }

fs::path scratch(const std::string& name) { return pipetwin::test::scratch_dir("exec_dp", name); }

nlohmann::json json_of(const Result& r) { return nlohmann::json::parse(r.out.substr(r.out.find('{'))); }

// A global mini-batch of 8 samples in micro-batches of 2, 3 steps. (The
// hardware only prices the partition: a preset whose topology takes
// tensor-parallel groups.)
std::string common(const std::string& model, const std::string& optimizer, int m_per_replica, int d) {
  return "run --hardware a100 --model " + model + " --optimizer " + optimizer + " -m " + std::to_string(m_per_replica) + " -d " +
         std::to_string(d) + " --batch " + std::to_string(2 * m_per_replica * d) +
         " --steps 3 --lr 0.01 --seed 1 --threads 1 --json";
}

// One process, the whole batch: M = 4 micro-batches of 2.
struct Reference {
  std::map<int, std::vector<at::Tensor>> weights;
  std::vector<double> losses;
};
const Reference& reference(const std::string& model, const std::string& optimizer) {
  static std::map<std::string, Reference> cache;
  const std::string key = model + "/" + optimizer;
  if (!cache.count(key)) {
    const auto dir = scratch("reference_" + std::to_string(cache.size()));
    const auto r = run(common(model, optimizer, 4, 1) + " -s gpipe -k 1 --save-weights " + dir.string());
    EXPECT_EQ(r.code, 0) << r.out;
    cache[key] = {load_weights(dir), json_of(r).at("measured").at("losses").get<std::vector<double>>()};
  }
  return cache.at(key);
}

struct Case {
  std::string model, optimizer;
  int k;
  std::string schedule;
  std::string recompute;
  bool zero1;
  int t = 1, d = 2;
  bool sequence_parallel = false;
};

class DataParallelEquivalence : public ::testing::TestWithParam<Case> {};

// 3 Adam steps on the MLP, K in {1, 2} x recompute x ZeRO-1, and interleaved
// 1F1B; the Transformer with SGD (see the test for why not Adam there).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const int k : {1, 2}) {
    for (const char* recompute : {"none", "full"}) {
      for (const bool zero1 : {false, true}) out.push_back({kMlp, "adam", k, k == 1 ? "gpipe" : "1f1b", recompute, zero1});
    }
  }
  out.push_back({kMlp, "adam", 2, "interleaved-1f1b", "none", true});
  for (const bool zero1 : {false, true}) out.push_back({kTransformer, "sgd", 2, "1f1b", "full", zero1});
  // Tensor parallelism (the Transformer: Megatron splits its layers, not the
  // MLP's), T = 2 x K in {1, 2} x D in {1, 2}, recompute off and on, ZeRO-1
  // off and on where D = 2, and sequence parallelism.
  for (const int k : {1, 2}) {
    for (const int d : {1, 2}) {
      for (const char* recompute : {"none", "full"}) {
        for (const bool zero1 : d == 2 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
          out.push_back({kTransformer, "sgd", k, k == 1 ? "gpipe" : "1f1b", recompute, zero1, 2, d});
        }
      }
    }
  }
  out.push_back({kTransformer, "sgd", 2, "1f1b", "full", true, 2, 2, true});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "none", false, 2, 1, true});
  return out;
}

}  // namespace

// Each replica's gradients are the sum over its micro-batches of the mean
// loss's; the data group sums them over the replicas and divides by D (a
// power of 2: exact). One process adds the same four micro-batch terms as
// ((g0 + g1) + g2) + g3, the replicas as (g0 + g1) + (g2 + g3): the only
// difference is that last rounding, |dg| <= 2^-24 |g|, so the weights differ
// by about lr x 2^-24 x (the update's sensitivity) per step, ~1e-8 measured,
// against the 1e-6 checked; a wrong share, a missing or doubled reduction or
// a stale shard moves a weight by ~lr = 1e-2 (OneReplicasHalfAlone... below).
// Tensor parallelism reorders the sums inside a layer too (a row-parallel
// product is two partial sums added by the all-reduce): again one rounding
// per sum, 1.2e-7 measured.
// Adam divides the gradient by its own running size, so where a gradient is
// pure rounding noise (exactly 0 in exact arithmetic) its step is +-lr on the
// noise's sign, whatever the order of the sums: the Transformer's key bias is
// such a parameter (softmax ignores a shift common to a row's scores), and
// there its weights move by up to 5e-4 between the two orders. The same
// happens in one process: --threads 2 against --threads 1 (intra-op sums in
// another order) moves the Transformer's weights by 3.0e-4 after 3 Adam
// steps, and M = 8 micro-batches of 1 against M = 4 of 2 by 1.4e-3. So the
// Transformer is checked with SGD, the MLP (no such parameter) with Adam.
TEST_P(DataParallelEquivalence, WeightsEqualOneProcessOfTheWholeBatch) {
  const auto& c = GetParam();
  const auto dir = scratch("dp");
  const int v = c.schedule == "interleaved-1f1b" ? 2 : 1;
  const auto r = run(common(c.model, c.optimizer, 4 / c.d, c.d) + " -s " + c.schedule + " -k " + std::to_string(c.k) +
                     " -v " + std::to_string(v) + " -t " + std::to_string(c.t) + " --recompute " + c.recompute +
                     (c.zero1 ? " --zero1" : "") + (c.sequence_parallel ? " --sequence-parallel" : "") +
                     " --save-weights " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto& ref = reference(c.model, c.optimizer);
  const double diff = max_difference(load_weights(dir), ref.weights);
  EXPECT_GE(diff, 0) << "the layers saved differ from the reference's";
  EXPECT_LT(diff, 1e-6) << c.schedule << " T=" << c.t << " K=" << c.k << " D=" << c.d << " recompute " << c.recompute
                        << (c.zero1 ? " ZeRO-1" : "") << (c.sequence_parallel ? " SP" : "");
  const auto losses = json_of(r).at("measured").at("losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), ref.losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], ref.losses[i], 1e-6) << "step " << i;
  std::printf("%s %s %s T=%d K=%d D=%d recompute %s%s%s: max |w - w(one process)| = %.3g\n",
              fs::path(c.model).stem().c_str(), c.optimizer.c_str(), c.schedule.c_str(), c.t, c.k, c.d, c.recompute.c_str(),
              c.zero1 ? " ZeRO-1" : "", c.sequence_parallel ? " SP" : "", diff);
}

INSTANTIATE_TEST_SUITE_P(Exec, DataParallelEquivalence, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string name = fs::path(info.param.model).stem().string() + "_" + info.param.optimizer + "_" + info.param.schedule +
                     "_t" + std::to_string(info.param.t) + "_d" + std::to_string(info.param.d) +
                     (info.param.sequence_parallel ? "_sp" : "") + "_k" + std::to_string(info.param.k) + "_" + info.param.recompute +
                     (info.param.zero1 ? "_zero1" : "");
  for (auto& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
});

// Without the reduction the replicas would train on their halves apart: the
// saved weights (replica 0's) then differ from the whole batch's by far more
// than rounding. This is what the check above would see if REDUCE_GRAD did nothing.
TEST(DataParallel, OneReplicasHalfAloneIsFarFromTheWholeBatch) {
  const auto dir = scratch("half");
  const auto r = run(common(kMlp, "adam", 2, 1) + " -s gpipe -k 1 --save-weights " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_GT(max_difference(load_weights(dir), reference(kMlp, "adam").weights), 1e-4);
}

// The measured trace holds every stage's REDUCE_GRAD, timed from its post to
// its completion, after the stage's last backward and before its STEP.
TEST(DataParallel, TheTraceTimesEveryReduction) {
  const auto dir = scratch("trace");
  const auto trace = dir / "t.json";
  const auto r = run(common(kTransformer, "adam", 2, 2) + " -s 1f1b -k 2 --trace " + trace.string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream in(trace);
  const auto j = nlohmann::json::parse(in);
  int reductions = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    const std::string name = e.value("name", "");
    if (name.find("REDUCE_GRAD") == std::string::npos) continue;
    ++reductions;
    EXPECT_GT(e.at("dur").get<double>(), 0) << name;
  }
  EXPECT_EQ(reductions, 2) << "one per stage";
  const auto measured = json_of(r).at("measured");
  EXPECT_EQ(measured.at("step_times_s").size(), 3u);
  // Four processes: (replica, pipeline rank) = (0, 0), (1, 0), (0, 1), (1, 1), Megatron-LM's order.
  ASSERT_EQ(measured.at("ranks").size(), 4u);
  EXPECT_EQ(measured.at("ranks")[1].at("replica").get<int>(), 1);
  EXPECT_EQ(measured.at("ranks")[2].at("pipeline_rank").get<int>(), 1);
  // Each process says what its data group reduces: stage 1 (on pipeline rank 1) over devices 2 and 3.
  const auto& c = measured.at("ranks")[3].at("collectives").at(0);
  EXPECT_EQ(c.at("stage").get<int>(), 1);
  EXPECT_EQ(c.at("kind").get<std::string>(), "all-reduce");
  EXPECT_EQ(c.at("group"), nlohmann::json({2, 3}));
  EXPECT_GT(c.at("bytes").get<double>(), 0);
  EXPECT_FALSE(measured.at("ranks")[0].contains("tp_collective_s")) << "T = 1: no tensor group";
}

// With T = 2, every process records per step the seconds it spent in its
// tensor group's collectives: some, and less than the step.
TEST(TensorParallel, TheTraceRecordsEachProcesssCollectiveSeconds) {
  const auto r = run(common(kTransformer, "sgd", 2, 1) + " -s 1f1b -k 2 -t 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto measured = json_of(r).at("measured");
  const auto steps = measured.at("step_times_s").get<std::vector<double>>();
  ASSERT_EQ(measured.at("ranks").size(), 4u);
  for (const auto& rank : measured.at("ranks")) {
    const auto seconds = rank.at("tp_collective_s").get<std::vector<double>>();
    ASSERT_EQ(seconds.size(), steps.size()) << rank.dump();
    for (std::size_t i = 0; i < steps.size(); ++i) {
      EXPECT_GT(seconds[i], 0) << "rank " << rank.at("rank") << ", step " << i;
      EXPECT_LT(seconds[i], steps[i]) << "rank " << rank.at("rank") << ", step " << i;
    }
  }
}

// Replicas with weight stashing would drift apart, each with its own versions: refused, naming the option.
TEST(DataParallel, WeightStashingAcrossReplicasIsRefused) {
  const auto r = run(common(kTransformer, "adam", 2, 2) + " -s pipedream -k 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("-d 2 with weight stashing"), std::string::npos) << r.out;
}
