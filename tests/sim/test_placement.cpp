// Placement comes from the Program alone: 2K stages placed V-shaped (rank r
// holds stages r and 2K-1-r, as ZB-V and DualPipe-V place them) are costed
// and simulated with transfers only where two consecutive stages sit on
// different ranks, in both engines, and the schedule read back from its own
// CSV file is predicted the same to 1e-9. The zb-v generator's Program is
// placed as the hand-built V and simulated the same way.
#include <gtest/gtest.h>

#include <cmath>

#include "models/families.hpp"
#include "models/layer_graph.hpp"
#include "models/stage_costs.hpp"
#include "models/stage_table.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

namespace {

// Every forward of a stage, stage by stage down the V, then every backward
// back up: a looped breadth-first order over the V-shaped placement.
ps::Program v_shaped(int K, int M) {
  ps::Program p = ps::make_program("v-bfs", K, 2, M, ps::RecomputePolicy::None);
  const int S = 2 * K;
  for (int s = 0; s < S; ++s) p.stage_to_rank[s] = ps::RankId{s < K ? s : S - 1 - s};
  for (int s = 0; s < S; ++s) {
    for (int mb = 0; mb < M; ++mb) p.ranks[p.rank_of(ps::StageId{s}).value].push_back(ps::make_action(ps::Op::F, s, mb));
  }
  for (int s = S - 1; s >= 0; --s) {
    for (int mb = 0; mb < M; ++mb) p.ranks[p.rank_of(ps::StageId{s}).value].push_back(ps::make_action(ps::Op::B, s, mb));
  }
  return ps::lower(std::move(p));
}

struct Predicted {
  ps::Timeline fast, simgrid;
};

Predicted predict(const pm::Model& model, const pm::Hardware& hw, const ps::Program& program) {
  pm::PartitionRequest r;
  r.program = program;
  r.microbatch_size = 2;
  const pm::StageCostModel costs(model, hw, r);
  const auto table = pm::stage_table(costs, hw, program);
  auto fast = ps::evaluate(program, table);
  EXPECT_FALSE(fast.deadlocked());
  return {fast.timeline, pipetwin::sim::simulate({program, table, hw.topology}).timeline};
}

void expect_same(const ps::Timeline& a, const ps::Timeline& b, const std::string& what) {
  ASSERT_EQ(a.ranks.size(), b.ranks.size()) << what;
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    ASSERT_EQ(a.ranks[r].size(), b.ranks[r].size()) << what << " rank " << r;
    for (std::size_t n = 0; n < a.ranks[r].size(); ++n) {
      const auto &x = a.ranks[r][n], &y = b.ranks[r][n];
      EXPECT_EQ(ps::to_string(x.action), ps::to_string(y.action)) << what << " rank " << r;
      EXPECT_NEAR(x.start, y.start, 1e-9) << what << " " << ps::to_string(x.action);
      EXPECT_NEAR(x.end, y.end, 1e-9) << what << " " << ps::to_string(x.action);
    }
  }
}

int transfers_of_stage(const ps::Timeline& t, int stage, ps::Op op) {
  int n = 0;
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) n += a.action.op == op && a.action.stage.value == stage;
  }
  return n;
}

}  // namespace

TEST(Placement, AVShapedProgramIsCostedAndSimulatedWithTransfersOnlyBetweenRanks) {
  // 12 layers: an embedding, 10 blocks, the head.
  const auto model = pm::in_topological_order(pm::transformer_model({10, 256, 1024, 4, 64, 1000}, pm::Precision::FP32, "t10"));
  pm::Hardware hw = pm::preset("a100");
  hw.topology.kind = pm::TopologyKind::AllToAll;
  hw.topology.intra = {5e-6, 50e9};  // a transfer costs something: charging one wrongly shows
  for (const int K : {2, 3}) {
    const int M = 4, S = 2 * K;
    ps::Program program = v_shaped(K, M);
    const int n = static_cast<int>(model.layers.size());
    for (int s = 0; s < S; ++s) program.partition.push_back({s * n / S, (s + 1) * n / S});
    ps::validate(program);
    const std::string at = "K=" + std::to_string(K);

    // Costed: stage K-1 hands its activations to stage K on its own rank.
    pm::PartitionRequest r;
    r.program = program;
    r.microbatch_size = 2;
    const pm::StageCostModel costs(model, hw, r);
    EXPECT_EQ(costs.rank_of(K - 1), costs.rank_of(K)) << at;
    EXPECT_EQ(costs.rank_of(S - 1), 0) << at;
    const auto [i, j] = program.partition[K - 1];
    const double hop = 2 * (costs.device_of(K - 1).transfer_overhead_s +
                            hw.topology.path(costs.rank_of(K - 2), costs.rank_of(K - 1)).seconds(costs.cut_bytes(i)));
    EXPECT_GT(hop, 0);
    EXPECT_DOUBLE_EQ(costs.transfer_s(i, j, K - 1), hop) << at << ": only the cut from stage K-2 crosses ranks";
    const auto [i2, j2] = program.partition[K];
    EXPECT_DOUBLE_EQ(costs.transfer_s(i2, j2, K),
                     2 * (costs.device_of(K).transfer_overhead_s +
                          hw.topology.path(costs.rank_of(K), costs.rank_of(K + 1)).seconds(costs.cut_bytes(j2))))
        << at;

    // Simulated in both engines: no transfer between stages K-1 and K, one
    // per micro-batch at every other cut.
    const auto predicted = predict(model, hw, program);
    for (const auto* t : {&predicted.fast, &predicted.simgrid}) {
      for (int s = 0; s + 1 < S; ++s) {
        EXPECT_EQ(transfers_of_stage(*t, s, ps::Op::SEND_F), s == K - 1 ? 0 : M) << at << " stage " << s;
        EXPECT_EQ(transfers_of_stage(*t, s + 1, ps::Op::SEND_B), s == K - 1 ? 0 : M) << at << " stage " << s + 1;
      }
      EXPECT_GT(t->makespan(), 0);
    }

    // The same schedule read back from its own CSV file: the same placement,
    // the same predictions.
    ps::Program read = ps::parse_csv(ps::to_csv(program), at + ".csv");
    EXPECT_EQ(read.stage_to_rank, program.stage_to_rank) << at;
    EXPECT_EQ(read.ranks, program.ranks) << at;
    read.partition = program.partition;
    const auto again = predict(model, hw, read);
    expect_same(predicted.fast, again.fast, at + " fast");
    expect_same(predicted.simgrid, again.simgrid, at + " simgrid");
  }
}

TEST(Placement, TheZbVGeneratorPlacesItsStagesAsTheHandBuiltV) {
  const auto model = pm::in_topological_order(pm::transformer_model({10, 256, 1024, 4, 64, 1000}, pm::Precision::FP32, "t10"));
  pm::Hardware hw = pm::preset("a100");
  hw.topology.kind = pm::TopologyKind::AllToAll;
  hw.topology.intra = {5e-6, 50e9};
  for (const int K : {2, 3, 4}) {
    const int M = 5, S = 2 * K;
    ps::Program program = ps::build_schedule("zb-v", {K, M});
    EXPECT_EQ(program.stage_to_rank, v_shaped(K, M).stage_to_rank) << "K=" << K;
    const int n = static_cast<int>(model.layers.size());
    for (int s = 0; s < S; ++s) program.partition.push_back({s * n / S, (s + 1) * n / S});
    ps::validate(program);
    const auto predicted = predict(model, hw, program);
    for (const auto* t : {&predicted.fast, &predicted.simgrid}) {
      for (int s = 0; s + 1 < S; ++s) {
        EXPECT_EQ(transfers_of_stage(*t, s, ps::Op::SEND_F), s == K - 1 ? 0 : M) << "K=" << K << " stage " << s;
        EXPECT_EQ(transfers_of_stage(*t, s + 1, ps::Op::SEND_B), s == K - 1 ? 0 : M) << "K=" << K << " stage " << s + 1;
      }
      EXPECT_GT(t->makespan(), 0);
    }
  }
}
