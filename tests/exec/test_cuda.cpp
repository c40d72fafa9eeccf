// `pipetwin run --device cuda` on a real GPU: one rank trains like the CPU
// (same weights to fp32 rounding), its trace holds CUDA-event times and its
// report the caching allocator's peak; more ranks than GPUs on one host are
// refused up front; and, with each rank given a host identity of its own
// (NCCL_HOSTID), two ranks exchange activations and gradients through
// ProcessGroupNCCL on one GPU and end with the weights of one rank (every
// synchronous generator, V-shaped and zero-bubble ones included), and one
// whose peer is killed ends cleanly.
// Every test skips, saying why, where no CUDA device is usable (CI).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "schedule/generators.hpp"
#include "schedule/trace.hpp"
#include "tests/support/shell.hpp"
#include "tests/support/weights.hpp"

namespace fs = std::filesystem;

namespace {

using pipetwin::test::has;
using pipetwin::test::Result;
using pipetwin::test::load_weights;
using pipetwin::test::max_difference;
using pipetwin::test::run_shell;

const std::string kModels = PIPETWIN_TEST_MODELS;
const std::string kTransformer = kModels + "/tiny-transformer.yaml";

// Through a shell, under `timeout` so that a hang fails the test instead of holding it.
Result run(const std::string& args, const std::string& env = "", int limit_s = 300) {
  return run_shell(env + " timeout -k 5 " + std::to_string(limit_s) + " " + PIPETWIN_BINARY + " " + args + " 2>&1");
}

fs::path scratch(const std::string& name) { return pipetwin::test::scratch_dir("cuda", name); }

// The torchrun environment of rank `rank` of two on this host, with its own
// NCCL_HOSTID so that NCCL takes the two ranks on one GPU for two hosts.
std::string nccl_rank_env(int rank, int port, const std::string& tag) {
  return "RANK=" + std::to_string(rank) + " WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
         std::to_string(port) + " NCCL_HOSTID=pipetwin-" + tag + "-" + std::to_string(rank);
}

// SGD: its update is linear in the gradient, so fp32 rounding stays at
// rounding size (Adam divides by the gradient's scale and magnifies it
// where a gradient is near zero).
std::string common(int m) {
  return "run --model " + kTransformer + " -m " + std::to_string(m) + " --batch " + std::to_string(2 * m) +
         " --steps 3 --optimizer sgd --lr 0.01 --seed 1 --threads 1";
}

#define SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device is usable here: the CUDA path needs a GPU"

}  // namespace

// One rank on the GPU trains like one on the CPU: the weights after three
// steps agree to fp32 rounding (different kernels sum in other orders), the
// loss falls, the trace holds every action with a CUDA-event duration, and
// the report holds the caching allocator's peak and a stash near the IR's.
TEST(Cuda, OneRankTrainsLikeTheCpu) {
  SKIP_WITHOUT_CUDA();
  const auto cpu = scratch("cpu"), gpu = scratch("gpu");
  const std::string trace = (gpu / "t.json").string();
  const auto a = run(common(4) + " -s 1f1b -k 1 --save-weights " + cpu.string());
  ASSERT_EQ(a.code, 0) << a.out;
  const auto b = run(common(4) + " -s 1f1b -k 1 --device cuda --json --trace " + trace + " --save-weights " + gpu.string());
  ASSERT_EQ(b.code, 0) << b.out;
  const double diff = max_difference(load_weights(cpu), load_weights(gpu));
  std::printf("[ cuda ] max |w_cuda - w_cpu| after 3 SGD steps: %.3g\n", diff);
  EXPECT_GE(diff, 0);
  EXPECT_LT(diff, 1e-5);

  const auto j = nlohmann::json::parse(b.out.substr(b.out.find('{')));
  const auto losses = j["measured"]["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_GT(j["measured"]["ranks"][0]["peak_allocated_bytes"].get<double>(), 0);
  // The stash is the forward's allocator growth: one-time workspaces (32 MiB
  // of cuBLAS on Hopper) are made before the measurement starts.
  const auto& stage = j["measured"]["stages"][0];
  EXPECT_LT(stage["peak_stash_bytes"].get<double>(), 2 * stage["predicted_peak_stash_bytes"].get<double>() + 1e6) << stage;
  const auto t = pipetwin::schedule::read_chrome_trace(trace);
  ASSERT_EQ(t.timeline.ranks.size(), 1u);
  EXPECT_EQ(t.timeline.ranks[0].size(), 4u * 2u + 1u);  // F and B per micro-batch, one STEP
  for (const auto& act : t.timeline.ranks[0]) {
    EXPECT_GE(act.start, -1e-9);
    EXPECT_GT(act.end, act.start);
    EXPECT_LT(act.end - act.start, 10.0);
  }
}

// Convolutions and batch norm through cuDNN: IEEE fp32 like the CPU. On an
// H100 one step left the weights 1e-6 apart; batch norm over a few samples
// magnifies that to 1.6e-4 (seed 1) or 6e-4 (seed 0) in three; with cuDNN's
// default TF32 they parted by 0.31.
TEST(Cuda, ConvNetTrainsLikeTheCpu) {
  SKIP_WITHOUT_CUDA();
  const auto cpu = scratch("conv_cpu"), gpu = scratch("conv_gpu");
  const std::string args = "run --model " + kModels + "/tiny-amoebanet.yaml -m 4 --batch 16 --steps 3 --optimizer sgd --lr 0.05 "
                           "--seed 1 --threads 1 -s 1f1b -k 1 --save-weights ";
  const auto a = run(args + cpu.string());
  ASSERT_EQ(a.code, 0) << a.out;
  const auto b = run(args + gpu.string() + " --device cuda");
  ASSERT_EQ(b.code, 0) << b.out;
  const double diff = max_difference(load_weights(cpu), load_weights(gpu));
  std::printf("[ cuda ] conv net: max |w_cuda - w_cpu| after 3 SGD steps: %.3g\n", diff);
  EXPECT_GE(diff, 0);
  EXPECT_LT(diff, 2e-3);
}

// NCCL refuses two ranks of one communicator on one GPU: the launcher says
// so before any rank starts, instead of failing inside NCCL.
TEST(Cuda, MoreRanksThanGpusAreRefusedUpFront) {
  SKIP_WITHOUT_CUDA();
  const int gpus = static_cast<int>(torch::cuda::device_count());
  const auto r = run(common(4) + " -s 1f1b -k " + std::to_string(gpus + 1) + " --device cuda", "", 120);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "ranks on this host, but only " + std::to_string(gpus) + " CUDA device(s) are visible")) << r.out;
  EXPECT_FALSE(has(r.out, "terminate called")) << r.out;
}

// Two ranks on one GPU through ProcessGroupNCCL: each started by hand with
// its own NCCL_HOSTID, so that NCCL takes them for two hosts (its network
// transport over loopback) instead of refusing a duplicate GPU. GPipe's
// guarantee holds across NCCL: the weights are those of one rank.
TEST(Cuda, TwoRanksExchangeThroughNcclOnOneGpu) {
  SKIP_WITHOUT_CUDA();
  const auto one = scratch("nccl_one"), two = scratch("nccl_two");
  const auto a = run(common(4) + " -s gpipe -k 1 --device cuda --save-weights " + one.string());
  ASSERT_EQ(a.code, 0) << a.out;
  const int port = pipetwin::test::free_port();
  const std::string args = common(4) + " -s 1f1b -k 2 --device cuda --timeout 60 --json --save-weights " + two.string();
  const auto env = [&](int rank) { return nccl_rank_env(rank, port, "test"); };
  const std::string log1 = (two / "rank1.log").string();
  const auto r = run(args, "(" + env(1) + " timeout -k 5 200 " + PIPETWIN_BINARY + " " + args + " >" + log1 + " 2>&1 &); " + env(0), 200);
  ASSERT_EQ(r.code, 0) << r.out;
  for (int i = 0; i < 100 && load_weights(two).size() < load_weights(one).size(); ++i) ::usleep(100000);
  const double diff = max_difference(load_weights(one), load_weights(two));
  std::printf("[ cuda ] max |w_nccl(K=2) - w(K=1)| after 3 steps: %.3g\n", diff);
  EXPECT_GE(diff, 0);
  EXPECT_LT(diff, 2e-6);
}

// A peer killed mid-run (NCCL): the other rank does not hang, nor abort with
// ProcessGroupNCCL's stack trace a minute later (its default); it ends with
// status 1 within about --timeout, naming itself, where it was and its peer.
TEST(Cuda, ALostNcclPeerEndsTheRankWithItsName) {
  SKIP_WITHOUT_CUDA();
  const auto dir = scratch("lost");
  const int port = pipetwin::test::free_port();
  const std::string args = "run --model " + kTransformer + " -m 4 --batch 8 --steps 1000000 -s 1f1b -k 2 --device cuda --timeout 10";
  const auto env = [&](int rank) { return nccl_rank_env(rank, port, "lost"); };
  const std::string pid = (dir / "pid").string();
  const std::string peer = "(" + env(1) + " " + PIPETWIN_BINARY + " " + args + " >" + (dir / "rank1.log").string() +
                           " 2>&1 & echo $! >" + pid + "; sleep 8; kill -9 $(cat " + pid + ")) & ";
  const auto start = std::chrono::steady_clock::now();
  const auto r = run(args, peer + env(0), 90);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_LT(took, 40) << r.out;
  EXPECT_TRUE(has(r.out, "pipetwin: error: rank 0, ")) << r.out;  // "..., end of step 150: no progress for 10 s: ..."
  // Either NCCL saw the connection close ("lost rank 1 ..."), or the rank's
  // watch saw no progress ("... a transfer with rank(s) 1 ...").
  EXPECT_TRUE(has(r.out, "lost rank 1") || has(r.out, "transfer with rank(s) 1")) << r.out;
  EXPECT_FALSE(has(r.out, "terminate called")) << r.out;
}

namespace {

// One rank on the GPU (cached per reference): the weights every K must end with.
const std::map<int, std::vector<at::Tensor>>& cuda_reference(const std::string& schedule) {
  static std::map<std::string, std::map<int, std::vector<at::Tensor>>> cache;
  if (!cache.count(schedule)) {
    const auto dir = scratch("ref_" + std::to_string(cache.size()));
    const auto r = run(common(4) + " -s " + schedule + " -k 1 --device cuda --save-weights " + dir.string());
    EXPECT_EQ(r.code, 0) << r.out;
    cache[schedule] = load_weights(dir);
  }
  return cache.at(schedule);
}

struct NcclCase {
  std::string schedule;
  int v;
  std::string recompute;
};

// Every synchronous generator but 1f1b (above) at K = 2; V = 2 where it has
// several stages per rank; the V-shaped ones with recompute too.
std::vector<NcclCase> nccl_cases() {
  std::vector<NcclCase> cases;
  for (const auto& g : pipetwin::schedule::generators()) {
    const std::string name(g.name);
    if (name == "pipedream" || name == "1f1b") continue;
    const int v = g.virtual_stages ? 2 : std::max(1, g.fixed_stages_per_rank);
    cases.push_back({name, v, "none"});
    if (g.fixed_stages_per_rank == 2) cases.push_back({name, v, "full"});
  }
  return cases;
}

class NcclEverySchedule : public ::testing::TestWithParam<NcclCase> {};

}  // namespace

// Two ranks over ProcessGroupNCCL on one GPU, each schedule: the activations
// and gradients of a V-shaped schedule cross one rank pair both ways in
// different orders, which one group per channel kind keeps apart; the
// weights after 3 SGD steps equal one rank's (looped BFS: one rank running
// its order, since it sums each stage's gradients in reverse).
TEST_P(NcclEverySchedule, WeightsEqualOneRanks) {
  SKIP_WITHOUT_CUDA();
  const auto& c = GetParam();
  const auto dir = scratch("nccl_" + c.schedule + "_" + c.recompute);
  const int port = pipetwin::test::free_port();
  const std::string args = common(4) + " -s " + c.schedule + " -k 2 -v " + std::to_string(c.v) + " --recompute " +
                           c.recompute + " --device cuda --timeout 60 --save-weights " + dir.string();
  const auto env = [&](int rank) { return nccl_rank_env(rank, port, c.schedule); };
  const std::string log1 = (dir / "rank1.log").string();
  const auto r = run(args, "(" + env(1) + " timeout -k 5 200 " + PIPETWIN_BINARY + " " + args + " >" + log1 + " 2>&1 &); " + env(0), 200);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto& ref = cuda_reference(c.schedule == "looped-bfs" ? "looped-bfs -v 2" : "gpipe");
  for (int i = 0; i < 100 && load_weights(dir).size() < ref.size(); ++i) ::usleep(100000);
  const double diff = max_difference(load_weights(dir), ref);
  std::printf("[ cuda ] %s V=%d recompute %s: max |w_nccl(K=2) - w(K=1)| after 3 steps: %.3g\n", c.schedule.c_str(), c.v,
              c.recompute.c_str(), diff);
  EXPECT_GE(diff, 0);
  EXPECT_LT(diff, 2e-6);
}

INSTANTIATE_TEST_SUITE_P(Cuda, NcclEverySchedule, ::testing::ValuesIn(nccl_cases()), [](const auto& info) {
  std::string name = info.param.schedule + "_" + info.param.recompute;
  for (auto& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
});
