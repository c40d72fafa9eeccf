// `pipetwin run -t T -d D` across real processes: D data-parallel replicas
// of a K-stage pipeline whose every rank is a group of T tensor-parallel
// processes (Megatron-LM's split of the Transformer's layers), each replica
// on its share of the mini-batch, reducing each stage's gradients over Gloo
// where the IR says REDUCE_GRAD (ZeRO-1: a reduce-scatter, the step on a
// shard, an all-gather). The weights after 3 steps equal one process's run
// of the same global batch, and the measured trace times every reduction.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cctype>
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
const std::string kMoe = kModels + "/tiny-moe.yaml";
const std::string kSparseMoe = kModels + "/tiny-moe-sparse.yaml";

Result run(const std::string& args) { return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1"); }

fs::path scratch(const std::string& name) { return pipetwin::test::scratch_dir("exec_dp", name); }

nlohmann::json json_of(const Result& r) { return nlohmann::json::parse(r.out.substr(r.out.find('{'))); }

// The complete ("X") events of a measured trace file: its actions.
std::vector<nlohmann::json> complete_events(const fs::path& trace) {
  std::ifstream in(trace);
  const auto j = nlohmann::json::parse(in);
  std::vector<nlohmann::json> out;
  for (const auto& e : j.at("traceEvents")) {
    if (e.value("ph", "") == "X") out.push_back(e);
  }
  return out;
}

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
  int zero;  // ZeRO's stage
  int t = 1, d = 2;
  bool sequence_parallel = false;
  bool reshard = true;  // ZeRO-3: --reshard-after-forward
  int shard_group = 0;  // HSDP
  std::string buckets = "";  // --grad-bucket-mb (and --grad-bucket-first-mb) MB
  int expert = 1;       // --expert: a mixture's experts over E replicas
  int active = 0;       // --max-active-stages: FSDP's UNSHARD/RESHARD
  std::string words() const {
    return std::string(zero > 0 ? " ZeRO-" + std::to_string(zero) : "") + (zero == 3 && !reshard ? " reshard off" : "") +
           (active > 0 ? " UNSHARD/RESHARD " + std::to_string(active) + " active" : "") +
           (shard_group > 0 ? " HSDP/" + std::to_string(shard_group) : "") + (sequence_parallel ? " SP" : "") +
           (buckets.empty() ? "" : " buckets " + buckets) + (expert > 1 ? " E=" + std::to_string(expert) : "");
  }
};

class DataParallelEquivalence : public ::testing::TestWithParam<Case> {};

// 3 Adam steps on the MLP, K in {1, 2} x recompute x ZeRO 0 to 3, and
// interleaved 1F1B; the Transformer with SGD (see the test for why not Adam
// there), ZeRO-3 resharding after the forward or not, and under zero-bubble
// schedules (a W needs no weights; the gradients are reduced after it).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const int k : {1, 2}) {
    for (const char* recompute : {"none", "full"}) {
      for (const int zero : {0, 1, 2, 3}) out.push_back({kMlp, "adam", k, k == 1 ? "gpipe" : "1f1b", recompute, zero});
    }
  }
  out.push_back({kMlp, "adam", 2, "interleaved-1f1b", "none", 1});
  out.push_back({kMlp, "adam", 2, "interleaved-1f1b", "full", 3});
  out.push_back({kMlp, "adam", 2, "1f1b", "none", 3, 1, 2, false, false});
  for (const int zero : {0, 1, 2, 3}) out.push_back({kTransformer, "sgd", 2, "1f1b", "full", zero});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "none", 3});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "none", 3, 1, 2, false, false});
  out.push_back({kTransformer, "sgd", 2, "zb-h1", "none", 3});
  out.push_back({kTransformer, "sgd", 2, "zb-h1", "none", 2});
  // ZeRO-3 under checkpoints inside the stages: a group's re-run in the
  // backward gathers its layers' weights again.
  out.push_back({kTransformer, "sgd", 2, "1f1b", "uniform:1", 3});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "uniform:2", 3, 1, 2, false, false});
  out.push_back({kMlp, "adam", 2, "1f1b", "block:1", 3});
  out.push_back({kMlp, "adam", 2, "1f1b", "uniform:1", 0});
  out.push_back({kTransformer, "sgd", 2, "zb-h1", "selective", 3});
  // HSDP: D = 4 replicas in shard groups of 2 (a reduce-scatter inside each,
  // an all-reduce across them), ZeRO 1 to 3.
  for (const int zero : {1, 2, 3}) out.push_back({kMlp, "adam", 2, "1f1b", "none", zero, 1, 4, false, true, 2});
  // DDP's buckets, all-reduced as the last backward makes them (a W's
  // under zb-h1), the first one apart, and inside a tensor group.
  out.push_back({kMlp, "adam", 2, "1f1b", "full", 0, 1, 2, false, true, 0, "0.001"});
  out.push_back({kTransformer, "sgd", 2, "zb-h1", "none", 0, 1, 2, false, true, 0, "0.004 --grad-bucket-first-mb 0.001"});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "none", 0, 2, 2, false, true, 0, "0.002"});
  // Tensor parallelism (the Transformer: Megatron splits its layers, not the
  // MLP's), T = 2 x K in {1, 2} x D in {1, 2}, recompute off and on, ZeRO-1
  // off and on where D = 2, and sequence parallelism.
  for (const int k : {1, 2}) {
    for (const int d : {1, 2}) {
      for (const char* recompute : {"none", "full"}) {
        for (const int zero : d == 2 ? std::vector<int>{0, 1} : std::vector<int>{0}) {
          out.push_back({kTransformer, "sgd", k, k == 1 ? "gpipe" : "1f1b", recompute, zero, 2, d});
        }
      }
    }
  }
  out.push_back({kTransformer, "sgd", 2, "1f1b", "full", 3, 2, 2});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "full", 1, 2, 2, true});
  out.push_back({kTransformer, "sgd", 2, "1f1b", "none", 0, 2, 1, true});
  // A mixture of experts: replicated (E = 1, with ZeRO-3 too); its experts
  // over E = 2 replicas of D = 2 (all-to-alls, nothing else reduces them)
  // and of D = 4 (the experts' gradients summed over the two replicas that
  // hold them), over E = 4; under 1F1B with a pipeline, zb-h1 (the experts'
  // weight gradients deferred to W) and checkpoints (the re-run inside B
  // exchanges the tokens again).
  out.push_back({kMoe, "sgd", 1, "gpipe", "none", 0});
  out.push_back({kMoe, "sgd", 2, "1f1b", "none", 3});
  out.push_back({kMoe, "sgd", 1, "gpipe", "none", 0, 1, 2, false, true, 0, "", 2});
  out.push_back({kMoe, "sgd", 2, "1f1b", "none", 0, 1, 2, false, true, 0, "", 2});
  out.push_back({kMoe, "sgd", 2, "1f1b", "none", 0, 1, 4, false, true, 0, "", 2});
  out.push_back({kMoe, "sgd", 1, "gpipe", "none", 0, 1, 4, false, true, 0, "", 4});
  out.push_back({kMoe, "sgd", 2, "zb-h1", "none", 0, 1, 2, false, true, 0, "", 2});
  out.push_back({kMoe, "sgd", 2, "1f1b", "uniform:1", 0, 1, 2, false, true, 0, "", 2});
  out.push_back({kMoe, "sgd", 2, "1f1b", "full", 0, 1, 2, false, true, 0, "", 2});
  // Megatron-LM's combined 1F1B (OVERLAP_F_B pairs, their halves in turn),
  // without a pipeline (V = 1) and interleaved (K = 2, V = 2).
  out.push_back({kMoe, "sgd", 1, "combined-1f1b", "none", 0, 1, 2, false, true, 0, "", 2});
  out.push_back({kMoe, "sgd", 2, "combined-1f1b", "none", 0, 1, 2, false, true, 0, "", 2});
  // FSDP's UNSHARD and RESHARD (PyTorch's runtime lowering): one of a
  // rank's two stages gathered at a time, so each is gathered again between
  // its forwards and its backwards (under recompute, for its re-runs too).
  out.push_back({kMlp, "adam", 2, "interleaved-1f1b", "none", 3, 1, 2, false, false, 0, "", 1, 1});
  out.push_back({kTransformer, "sgd", 2, "looped-bfs", "full", 3, 1, 2, false, false, 0, "", 1, 1});
  out.push_back({kTransformer, "sgd", 2, "interleaved-1f1b", "none", 3, 1, 2, false, false, 0, "", 1, 3});
  // Two tokens a micro-batch, one expert each, over E = 4: most members
  // receive nothing from most others.
  out.push_back({kSparseMoe, "sgd", 1, "gpipe", "none", 0, 1, 4, false, true, 0, "", 4});
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
  const int v = c.schedule == "interleaved-1f1b" || c.schedule == "looped-bfs" || (c.schedule == "combined-1f1b" && c.k > 1) ? 2 : 1;
  const auto r = run(common(c.model, c.optimizer, 4 / c.d, c.d) + " -s " + c.schedule + " -k " + std::to_string(c.k) +
                     " -v " + std::to_string(v) + " -t " + std::to_string(c.t) + " --recompute " + c.recompute +
                     (c.zero == 1 ? " --zero1" : c.zero > 1 ? " --zero " + std::to_string(c.zero) : "") +
                     (c.reshard ? "" : " --reshard-after-forward off") + (c.sequence_parallel ? " --sequence-parallel" : "") +
                     (c.shard_group > 0 ? " --shard-group " + std::to_string(c.shard_group) : "") +
                     (c.buckets.empty() ? "" : " --grad-bucket-mb " + c.buckets) +
                     (c.expert > 1 ? " --expert " + std::to_string(c.expert) : "") +
                     (c.active > 0 ? " --max-active-stages " + std::to_string(c.active) : "") + " --save-weights " + dir.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto& ref = reference(c.model, c.optimizer);
  const double diff = max_difference(load_weights(dir), ref.weights);
  EXPECT_GE(diff, 0) << "the layers saved differ from the reference's";
  EXPECT_LT(diff, 1e-6) << c.schedule << " T=" << c.t << " K=" << c.k << " D=" << c.d << " recompute " << c.recompute
                        << c.words();
  const auto losses = json_of(r).at("measured").at("losses").get<std::vector<double>>();
  ASSERT_EQ(losses.size(), ref.losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], ref.losses[i], 1e-6) << "step " << i;
  std::printf("%s %s %s T=%d K=%d D=%d recompute %s%s: max |w - w(one process)| = %.3g\n",
              fs::path(c.model).stem().c_str(), c.optimizer.c_str(), c.schedule.c_str(), c.t, c.k, c.d, c.recompute.c_str(),
              c.words().c_str(), diff);
}

INSTANTIATE_TEST_SUITE_P(Exec, DataParallelEquivalence, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string name = fs::path(info.param.model).stem().string() + "_" + info.param.optimizer + "_" + info.param.schedule +
                     "_t" + std::to_string(info.param.t) + "_d" + std::to_string(info.param.d) +
                     (info.param.sequence_parallel ? "_sp" : "") + "_k" + std::to_string(info.param.k) + "_" + info.param.recompute +
                     (info.param.zero > 0 ? "_zero" + std::to_string(info.param.zero) : "") + (info.param.reshard ? "" : "_keep") +
                     (info.param.shard_group > 0 ? "_hsdp" + std::to_string(info.param.shard_group) : "") +
                     (info.param.buckets.empty() ? "" : "_buckets") +
                     (info.param.expert > 1 ? "_e" + std::to_string(info.param.expert) : "") +
                     (info.param.active > 0 ? "_unshard" + std::to_string(info.param.active) : "");
  for (auto& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
});

// The routed blocks' tokens go out and come back by all-to-all, and each
// process counts them: per step and micro-batch, each of the 3 routed blocks
// exchanges 4 times (dispatch and combine in the forward, both again in the
// backward), and each exchange moves every copy of every token once: the
// two members together send 4 × 2 members × (2 samples × 8 tokens × top-2 copies
// × 32 floats × 4 bytes) per block and micro-batch.
TEST(DataParallel, ExpertsTradeTheirTokensByAllToAll) {
  const auto r = run(common(kMoe, "sgd", 2, 2) + " -s gpipe -k 1 --expert 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ranks = json_of(r).at("measured").at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  const double per_exchange = 2.0 * 8 * 2 * 32 * 4;
  for (std::size_t step = 0; step < 3; ++step) {
    double bytes = 0;
    for (const auto& rank : ranks) {
      const auto& a = rank.at("all_to_all").at(step);
      EXPECT_EQ(a.at("calls").get<int>(), 3 * 2 * 4) << "step " << step;
      EXPECT_GT(a.at("seconds").get<double>(), 0);
      bytes += a.at("bytes").get<double>();
    }
    EXPECT_EQ(bytes, 3 * 2 * 4 * 2 * per_exchange) << "step " << step;
  }
  bool listed = false;
  for (const auto& c : ranks[1].at("collectives")) {
    if (c.at("dimension") == "expert") listed = c.at("group") == nlohmann::json({0, 1});
  }
  EXPECT_TRUE(listed) << ranks[1].at("collectives").dump();
}

// Each member of an expert group holds its experts only: over E = 2, every
// process holds half of the routed experts' weights (3 blocks × 4 experts ×
// 3 matrices of 32 × 16 fp32) fewer before its first step, to the byte, and
// the memory model says the same.
TEST(DataParallel, EachExpertLivesOnOneMemberOfItsGroup) {
  const auto held = [](int e) {
    const auto r = run(common(kMoe, "sgd", 2, 2) + " -s gpipe -k 1 --expert " + std::to_string(e));
    EXPECT_EQ(r.code, 0) << r.out;
    if (r.code != 0) return std::pair<double, double>{0, 0};
    const auto j = json_of(r);
    double baseline = 0;
    for (const auto& rank : j.at("measured").at("ranks")) baseline = std::max(baseline, rank.at("baseline_bytes").get<double>());
    return std::pair<double, double>{baseline, j.at("summary").at("memory_per_stage").at(0).at("bytes").at("weights").get<double>()};
  };
  const auto [whole, model_whole] = held(1);
  const auto [half, model_half] = held(2);
  const double routed = 3.0 * 4 * 3 * 32 * 16 * 4;
  EXPECT_DOUBLE_EQ(whole - half, routed / 2);
  EXPECT_DOUBLE_EQ(model_whole - model_half, routed / 2);
}

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
  int reductions = 0;
  for (const auto& e : complete_events(trace)) {
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

// ZeRO-2 and 3 measured on a wide MLP (its weights far above its
// activations), D = 4 replicas, Adam. Before the first step a ZeRO-3 rank
// holds, of each layer's n weights, ⌈n/4⌉ twice (its part of the weights and
// the part's fp32 master), where a rank without ZeRO holds all n: the
// difference is exact to the byte. Over the steps, the rank's peak falls
// from ZeRO-0 to 2 and from 2 to 3, each time by at least half of what the
// memory model (the run's `summary.memory_per_stage`) says it saves, and
// never below the model's own total (the executor's flat buffers, the
// backend's copies and Adam's temporaries come on top of it).
TEST(DataParallel, ZeroTwoAndThreeLowerTheMeasuredPeakAsTheModelSays) {
  const auto dir = scratch("zero_memory");
  {
    std::ofstream out(dir / "wide.yaml");
    out << "family: mlp\nname: wide-mlp\ninput: 16\nhidden: [512, 512, 512, 512, 512, 512, 512, 512, 512, 512]\n"
           "output: 4\nprecision: fp32\n";
  }
  std::int64_t whole = 0, parts = 0;  // elements: all weights; per replica, each layer's ⌈n/4⌉
  int width = 16;
  for (const int h : {512, 512, 512, 512, 512, 512, 512, 512, 512, 512, 4}) {
    const std::int64_t n = static_cast<std::int64_t>(width) * h + h;
    whole += n;
    parts += (n + 3) / 4;
    width = h;
  }
  struct Measured {
    double baseline, peak, model;
  };
  const auto measure = [&](int zero) {
    const auto r = run(common((dir / "wide.yaml").string(), "adam", 2, 4) + " -s 1f1b -k 1" +
                       (zero > 0 ? " --zero " + std::to_string(zero) : ""));
    Measured m{0, 0, 0};
    EXPECT_EQ(r.code, 0) << r.out;
    if (r.code != 0) return m;
    const auto j = json_of(r);
    for (const auto& rank : j.at("measured").at("ranks")) {
      m.baseline = std::max(m.baseline, rank.at("baseline_bytes").get<double>());
      m.peak = std::max(m.peak, rank.at("peak_allocated_bytes").get<double>());
    }
    for (const auto& [what, bytes] : j.at("summary").at("memory_per_stage").at(0).at("bytes").items()) {
      if (what != "reserve") m.model += bytes.get<double>();
    }
    std::printf("ZeRO-%d: before the first step %.3f MB, peak %.3f MB, the model's %.3f MB\n", zero, m.baseline / 1e6,
                m.peak / 1e6, m.model / 1e6);
    return m;
  };
  const Measured z0 = measure(0), z2 = measure(2), z3 = measure(3);
  EXPECT_DOUBLE_EQ(z3.baseline - 2.0 * 4 * static_cast<double>(parts), z0.baseline - 4.0 * static_cast<double>(whole));
  EXPECT_GE(z0.peak - z2.peak, 0.5 * (z0.model - z2.model));
  EXPECT_GE(z2.peak - z3.peak, 0.5 * (z2.model - z3.model));
  EXPECT_GT(z2.model - z3.model, 0) << "the model saves by sharding the weights too";
  for (const auto* m : {&z0, &z2, &z3}) EXPECT_GE(m->peak, m->model);
}

// ZeRO-3 (resharding after the forward): the trace times each stage's
// REDUCE_GRAD (from its post to the end of the stage's last reduce-scatter),
// each process reports per step the seconds its actions waited for the
// weights' all-gathers (some, less than the step), and says what its data
// group runs.
TEST(DataParallel, ZeroThreeTimesItsReductionsAndItsGathers) {
  const auto dir = scratch("zero3_trace");
  const auto trace = dir / "t.json";
  const auto r = run(common(kTransformer, "sgd", 2, 2) + " -s 1f1b -k 2 --zero 3 --trace " + trace.string());
  ASSERT_EQ(r.code, 0) << r.out;
  int reductions = 0;
  for (const auto& e : complete_events(trace)) {
    if (e.value("name", "").find("REDUCE_GRAD") == std::string::npos) continue;
    ++reductions;
    EXPECT_GE(e.at("dur").get<double>(), 0);
  }
  EXPECT_EQ(reductions, 2) << "one per stage";
  const auto measured = json_of(r).at("measured");
  const auto steps = measured.at("step_times_s").get<std::vector<double>>();
  ASSERT_EQ(measured.at("ranks").size(), 4u);
  for (const auto& rank : measured.at("ranks")) {
    const auto waits = rank.at("gather_wait_s").get<std::vector<double>>();
    ASSERT_EQ(waits.size(), steps.size()) << rank.dump();
    for (std::size_t i = 0; i < steps.size(); ++i) {
      EXPECT_GT(waits[i], 0) << "rank " << rank.at("rank") << ", step " << i;
      EXPECT_LT(waits[i], steps[i]) << "rank " << rank.at("rank") << ", step " << i;
    }
    const auto& c = rank.at("collectives").at(0);
    EXPECT_NE(c.at("kind").get<std::string>().find("all-gather per layer inside F"), std::string::npos) << c.dump();
    EXPECT_GT(c.at("bytes").get<double>(), 0);
  }
}

// FSDP's UNSHARD (ZeRO-3 keeping the weights, one of a rank's two stages
// gathered at a time): each is timed from its post to its gathers' end, as
// the simulator times it, and the stage's next compute starts after it (it
// waited for them); the step begins with the first stage's. A rank's first
// stage is gathered twice a step (for its forwards, then for its
// backwards), its second once (its forwards and backwards follow each
// other).
TEST(DataParallel, UnshardsAreTimedToTheirGathersEnd) {
  const auto dir = scratch("unshard_trace");
  const auto trace = dir / "t.json";
  const auto r = run(common(kMlp, "adam", 2, 2) + " -s interleaved-1f1b -k 2 -v 2 --zero 3 --reshard-after-forward off "
                     "--max-active-stages 1 --trace " + trace.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto events = complete_events(trace);
  std::map<int, std::map<int, int>> unshards;  // process -> stage -> UNSHARDs
  int timed = 0, all = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string name = events[i].value("name", "");
    if (name.find("UNSHARD") == std::string::npos) continue;
    const int pid = events[i].at("pid").get<int>();
    const std::string stage = name.substr(0, name.find('U'));
    ++unshards[pid][std::stoi(stage)];
    const double start = events[i].at("ts").get<double>(), end = start + events[i].at("dur").get<double>();
    if (pid == 0) timed += end > start, ++all;  // the first stage's rank, whose gather begins the step
    // The stage's next compute on that process (µs; the watcher notes the end a little after the wait returns).
    double next = -1;
    for (const auto& e : events) {
      const std::string n = e.value("name", "");
      const std::size_t k = stage.size();  // "<stage><F|B|I|W|R><micro-batch>", not a RECV
      const bool compute = n.size() > k + 1 && n.rfind(stage, 0) == 0 && std::string("FBIWR").find(n[k]) != std::string::npos &&
                           std::isdigit(static_cast<unsigned char>(n[k + 1]));
      if (e.at("pid").get<int>() == pid && compute && e.at("ts").get<double>() >= start && (next < 0 || e.at("ts").get<double>() < next)) {
        next = e.at("ts").get<double>();
      }
    }
    ASSERT_GE(next, 0) << name << " of process " << pid;
    EXPECT_GE(next, end - 1000) << name << " of process " << pid;
  }
  EXPECT_EQ(timed, all) << "the step begins with the first stage's UNSHARD: none of its rank's is cut to nothing";
  EXPECT_GT(all, 0);
  ASSERT_GE(unshards.size(), 2u);  // each pipeline rank
  for (const auto& [pid, by_stage] : unshards) {
    ASSERT_EQ(by_stage.size(), 2u) << "process " << pid;
    EXPECT_EQ(by_stage.begin()->second, 2 * by_stage.rbegin()->second) << "process " << pid;
  }
}

// DDP's buckets (--grad-bucket-mb): each stage's gradients in several, every
// one all-reduced while the stage's last backward (a B under 1F1B) still
// runs; under zb-h1 the last backward is a W, whose deferred weight
// gradients come at its end, so its buckets all go out after it. As
// simulated, the trace's REDUCE_GRAD runs from the start of that backward.
TEST(DataParallel, BucketsGoOutWhileTheLastBackwardRuns) {
  for (const std::string schedule : {"1f1b", "zb-h1"}) {
    const auto trace = scratch("buckets") / (schedule + ".json");
    const auto r = run(common(kTransformer, "sgd", 2, 2) + " -s " + schedule + " -k 2 --grad-bucket-mb 0.002 --trace " +
                       trace.string());
    ASSERT_EQ(r.code, 0) << r.out;
    std::map<int, double> last_backward, reduction;  // by stage: start (us)
    for (const auto& e : complete_events(trace)) {
      if (!e.contains("args")) continue;
      const std::string op = e["args"].value("op", "");
      const int s = e["args"].value("stage", -1);
      if (op == (schedule == "1f1b" ? "B" : "W")) last_backward[s] = std::max(last_backward[s], e.at("ts").get<double>());
      if (op == "REDUCE_GRAD") reduction[s] = e.at("ts").get<double>();
    }
    ASSERT_EQ(reduction.size(), 2u);
    for (const auto& [s, start] : reduction) EXPECT_NEAR(start, last_backward.at(s), 1.0) << schedule << ", stage " << s;
    for (const auto& rank : json_of(r).at("measured").at("ranks")) {
      const auto& c = rank.at("collectives").at(0);
      const int buckets = c.at("buckets").get<int>(), early = c.at("buckets_in_backward").get<int>();
      EXPECT_GE(buckets, 2) << c.dump();
      EXPECT_EQ(early, schedule == "1f1b" ? buckets : 0) << schedule << ": " << c.dump();
    }
  }
}
