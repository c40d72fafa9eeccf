// The partitioner against brute force on random small instances (chains and
// branching graphs, heterogeneous devices, tight memory), and its errors.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "models/families.hpp"
#include "models/partition.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

pm::Model random_model(std::mt19937& rng, int n, bool branching) {
  std::uniform_real_distribution<double> flops(1e9, 5e10);
  std::uniform_int_distribution<std::int64_t> params(1000, 5000000), elems(1000, 4000000);
  pm::Model m;
  m.name = "random";
  m.precision = pm::Precision::FP32;
  m.input_elems = elems(rng);
  for (int i = 0; i < n; ++i) {
    pm::Layer l;
    l.name = "l" + std::to_string(i);
    l.cost.forward_flops = flops(rng);
    l.cost.input_grad_flops = flops(rng);
    l.cost.weight_grad_flops = flops(rng);
    l.cost.params = params(rng);
    l.cost.stashed_elems = elems(rng);
    l.cost.output_elems = elems(rng);
    if (i > 0) l.inputs.push_back(i - 1);
    if (branching && i > 1 && rng() % 2) l.inputs.push_back(static_cast<int>(rng() % (i - 1)));  // a skip edge
    m.layers.push_back(l);
  }
  return m;
}

// Every split of n layers into S non-empty contiguous ranges.
void for_each_split(int n, int S, const std::function<void(const std::vector<ps::LayerRange>&)>& f) {
  std::vector<ps::LayerRange> ranges;
  std::function<void(int, int)> rec = [&](int begin, int s) {
    if (s == S - 1) {
      ranges.push_back({begin, n});
      f(ranges);
      ranges.pop_back();
      return;
    }
    for (int end = begin + 1; end <= n - (S - 1 - s); ++end) {
      ranges.push_back({begin, end});
      rec(end, s + 1);
      ranges.pop_back();
    }
  };
  rec(0, 0);
}

}  // namespace

TEST(Partition, OptimalMatchesBruteForceOnRandomInstances) {
  std::mt19937 rng(20261122);
  int compared = 0, infeasible = 0, constrained = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 8);
    const bool branching = trial % 2 == 1;
    const auto model = random_model(rng, n, branching);
    pm::Hardware hw = pm::preset("v100");
    pm::PartitionRequest r;
    const int K = 1 + static_cast<int>(rng() % std::min(n, 4));
    const int M = 1 + static_cast<int>(rng() % 4);
    r.microbatch_size = 1 + static_cast<int>(rng() % 3);
    r.program = ps::build_schedule(trial % 3 == 0 ? "1f1b" : "gpipe",
                                   {K, M, 1, trial % 5 == 0 ? ps::RecomputePolicy::Full : ps::RecomputePolicy::None});
    for (int k = 0; k < r.ranks(); ++k) {  // heterogeneous devices, memory from tight to ample
      pm::Device d = hw.device;
      d.peak_flops_fp32 *= 0.5 + (rng() % 100) / 50.0;
      d.memory_bytes = 2e8 + static_cast<double>(rng() % 3000) * 1e6;
      d.memory_reserve_bytes = 0;  // the range above is what the stages may use
      r.devices.push_back(d);
    }
    double best = std::numeric_limits<double>::infinity(), unconstrained = best;
    for_each_split(n, r.stages(), [&](const std::vector<ps::LayerRange>& ranges) {
      const auto p = pm::evaluate_partition(model, hw, r, ranges, pm::Method::Optimal);
      unconstrained = std::min(unconstrained, p.bottleneck_s);
      if (p.fits) best = std::min(best, p.bottleneck_s);
    });
    if (best == std::numeric_limits<double>::infinity()) {
      EXPECT_THROW(pm::partition_model(model, hw, r), pipetwin::Error) << "trial " << trial;
      ++infeasible;
      continue;
    }
    const auto p = pm::partition_model(model, hw, r);
    EXPECT_TRUE(p.fits) << "trial " << trial;
    for (const auto& st : p.stages) EXPECT_LE(st.memory_bytes, st.capacity_bytes) << "trial " << trial;
    EXPECT_NEAR(p.bottleneck_s, best, best * 1e-12) << "trial " << trial;
    if (best > unconstrained * (1 + 1e-9)) ++constrained;
    ++compared;
  }
  EXPECT_GE(compared, 200);
  EXPECT_GT(infeasible, 0);   // the memory limit did bite
  EXPECT_GT(constrained, 0);  // and changed the best split
  RecordProperty("compared", compared);
}

TEST(Partition, ParametersMethodBalancesParameterCounts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 6);
    const auto model = random_model(rng, n, false);
    pm::PartitionRequest r;
    r.program = ps::build_schedule("gpipe", {1 + static_cast<int>(rng() % std::min(n, 3)), 1});
    const auto hw = pm::preset("a100");
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    for_each_split(n, r.stages(), [&](const std::vector<ps::LayerRange>& ranges) {
      std::int64_t worst = 0;
      for (const auto& p : pm::evaluate_partition(model, hw, r, ranges, pm::Method::Parameters).stages) worst = std::max(worst, p.params);
      best = std::min(best, worst);
    });
    std::int64_t worst = 0;
    for (const auto& p : pm::partition_model(model, hw, r, pm::Method::Parameters).stages) worst = std::max(worst, p.params);
    EXPECT_EQ(worst, best);
  }
}

TEST(Partition, UniformSplitsByLayerCount) {
  const auto model = pm::mlp_model({8, 2, {8, 8, 8, 8, 8, 8, 8, 8}}, pm::Precision::FP32, "mlp");  // 9 layers
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {4, 1});
  const auto p = pm::partition_model(model, pm::preset("cpu"), r, pm::Method::Uniform);
  std::vector<int> sizes;
  for (const auto& range : p.ranges()) sizes.push_back(range.end - range.begin);
  EXPECT_EQ(sizes, (std::vector<int>{3, 2, 2, 2}));
}

TEST(Partition, BranchingCutsCarryEveryCrossingTensorOnce) {
  const auto model = pm::amoebanet_model({3, 16, 32, 3, 10}, pm::Precision::FP32, "amoeba");
  const auto cut = model.cut_elems();
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {2, 1});
  for (int p = 1; p < static_cast<int>(model.layers.size()); ++p) {
    const auto part = pm::evaluate_partition(model, pm::preset("v100"), r, {{0, p}, {p, static_cast<int>(model.layers.size())}},
                                             pm::Method::Optimal);
    EXPECT_DOUBLE_EQ(part.stages[0].cut_out_bytes, static_cast<double>(cut[p]) * 4) << "cut " << p;
    EXPECT_DOUBLE_EQ(part.stages[1].cut_in_bytes, static_cast<double>(cut[p]) * 4) << "cut " << p;
  }
}

TEST(Partition, RandomBranchingCutsCountEachCrossingTensorOnce) {
  // Independent count: the set of producers before the cut with a consumer at
  // or after it; a tensor read by several later layers is sent once.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 3 + static_cast<int>(rng() % 10);
    auto model = random_model(rng, n, true);
    for (int v = 2; v < n; ++v) {  // more fan-out: extra consumers of the same producer
      if (rng() % 3 == 0) model.layers[v].inputs.push_back(static_cast<int>(rng() % v));
    }
    pm::PartitionRequest r;
    r.program = ps::build_schedule("gpipe", {2, 1});
    r.microbatch_size = 1 + static_cast<int>(rng() % 4);
    for (int p = 1; p < n; ++p) {
      std::set<int> crossing;
      for (int v = p; v < n; ++v) {
        for (const int u : model.layers[v].inputs) {
          if (u < p) crossing.insert(u);
        }
      }
      double expected = 0;
      for (const int u : crossing) expected += static_cast<double>(model.layers[u].cost.output_elems);
      expected *= 4.0 * r.microbatch_size;  // fp32
      const auto part = pm::evaluate_partition(model, pm::preset("v100"), r, {{0, p}, {p, n}}, pm::Method::Optimal);
      EXPECT_DOUBLE_EQ(part.stages[0].cut_out_bytes, expected) << "trial " << trial << " cut " << p;
      EXPECT_DOUBLE_EQ(part.stages[1].cut_in_bytes, expected) << "trial " << trial << " cut " << p;
    }
  }
}

TEST(Partition, ASlowerDeviceGetsLessWork) {
  const auto model = pm::mlp_model({512, 10, std::vector<std::int64_t>(15, 2048)}, pm::Precision::FP32, "mlp");
  auto hw = pm::preset("a100");
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {2, 1});
  r.devices = {hw.device, hw.device};
  r.devices[1].peak_flops_fp32 /= 3;
  const auto p = pm::partition_model(model, hw, r);
  EXPECT_GT(p.stages[0].layers.end - p.stages[0].layers.begin, p.stages[1].layers.end - p.stages[1].layers.begin);
}

TEST(Partition, AHeterogeneousHardwareFileGivesTheSlowerRanksLessWork) {
  const auto model = pm::mlp_model({512, 10, std::vector<std::int64_t>(15, 2048)}, pm::Precision::FP32, "mlp");
  const auto hw = pm::load_hardware(std::string(PIPETWIN_EXAMPLES_DIR) + "/v100-p100-mixed.yaml");  // 2 V100, 2 P100
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {4, 1});
  const auto p = pm::partition_model(model, hw, r);
  const auto layers = [&](int s) { return p.stages[s].layers.end - p.stages[s].layers.begin; };
  EXPECT_GT(layers(0) + layers(1), layers(2) + layers(3));
  r.devices = hw.devices;  // the same as naming them in the request
  EXPECT_DOUBLE_EQ(pm::partition_model(model, hw, r).bottleneck_s, p.bottleneck_s);
  r.devices.clear();
  r.program = ps::build_schedule("gpipe", {5, 1});
  EXPECT_THROW(pm::partition_model(model, hw, r), pipetwin::Error);
}

TEST(Partition, RecomputeAndFewerMicrobatchesInFlightMakeItFit) {
  const auto model = pm::load_model(std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-24.yaml");
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {4, 32});
  try {
    pm::partition_model(model, pm::preset("v100"), r);
    FAIL() << "expected not to fit";
  } catch (const pipetwin::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no split of transformer-24 into 4 stages fits"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at best stage "), std::string::npos) << msg;
    EXPECT_NE(msg.find("over by "), std::string::npos) << msg;
  }
  r.program = ps::build_schedule("gpipe", {4, 32, 1, ps::RecomputePolicy::Full});
  EXPECT_TRUE(pm::partition_model(model, pm::preset("v100"), r).fits);
  r.program = ps::build_schedule("1f1b", {4, 32});  // stashes min(K - s, M) instead of M
  EXPECT_TRUE(pm::partition_model(model, pm::preset("v100"), r).fits);
}

TEST(Partition, MoreStagesThanLayersIsAClearError) {
  const auto model = pm::mlp_model({8, 2, {8}}, pm::Precision::FP32, "tiny");
  pm::PartitionRequest r;
  r.program = ps::build_schedule("gpipe", {3, 1});
  try {
    pm::partition_model(model, pm::preset("cpu"), r);
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot cut tiny (2 layers) into 3 stages"), std::string::npos) << e.what();
  }
}
