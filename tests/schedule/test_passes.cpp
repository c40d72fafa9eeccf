// The lowering passes: what each inserts, where, and that each is idempotent.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"

namespace ps = pipetwin::schedule;

namespace {
std::string row(const ps::Program& p, int rank) {
  std::string out;
  for (const auto& a : p.ranks[rank]) out += (out.empty() ? "" : " ") + ps::to_string(a);
  return out;
}
}  // namespace

TEST(Passes, InsertTransfersForGPipeK2M2) {
  const auto p = ps::insert_transfers(ps::generate("gpipe", {2, 2}));
  EXPECT_EQ(row(p, 0), "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1");
  EXPECT_EQ(row(p, 1), "1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1");
}

TEST(Passes, RecomputeGoesRightBeforeTheBackwardAndTheReceiveBetween) {
  const auto p = ps::lower(ps::generate("gpipe", {2, 2, 1, ps::RecomputePolicy::Full}));
  EXPECT_EQ(row(p, 0), "0F0 0SEND_F0 0F1 0SEND_F1 0R0 0RECV_B0 0B0 0R1 0RECV_B1 0B1 0STEP");
}

TEST(Passes, ExceptLastSkipsTheLastMicrobatch) {
  const auto p = ps::insert_recomputes(ps::generate("1f1b", {1, 3, 1, ps::RecomputePolicy::ExceptLast}));
  EXPECT_EQ(row(p, 0), "0F0 0R0 0B0 0F1 0R1 0B1 0F2 0B2");
}

TEST(Passes, ZeroBubbleRecomputesBeforeTheInputGradient) {
  const auto p = ps::insert_recomputes(ps::generate("zb-h1", {1, 1, 1, ps::RecomputePolicy::Full}));
  EXPECT_EQ(row(p, 0), "0F0 0R0 0I0 0W0");
}

TEST(Passes, NoTransferBetweenStagesOnTheSameRank) {
  // K=1, V=2: stages 0 and 1 both on rank 0.
  const auto p = ps::insert_transfers(ps::generate("interleaved-1f1b", {1, 1, 2}));
  EXPECT_FALSE(p.has_transfers());
}

TEST(Passes, InterleavedWrapsFromTheLastRankToTheFirst) {
  const auto p = ps::insert_transfers(ps::generate("interleaved-1f1b", {2, 2, 2}));
  // Stage 1 (rank 1) feeds stage 2 (rank 0).
  const auto& r1 = p.ranks[1];
  EXPECT_NE(std::find(r1.begin(), r1.end(), ps::make_action(ps::Op::SEND_F, 1, 0)), r1.end());
  const auto& r0 = p.ranks[0];
  EXPECT_NE(std::find(r0.begin(), r0.end(), ps::make_action(ps::Op::RECV_F, 2, 0)), r0.end());
}

TEST(Passes, OptimizerStepOncePerStageAtTheEnd) {
  const auto p = ps::insert_optimizer_step(ps::generate("interleaved-1f1b", {2, 2, 2}));
  EXPECT_EQ(ps::to_string(p.ranks[0][p.ranks[0].size() - 2]), "0STEP");
  EXPECT_EQ(ps::to_string(p.ranks[0].back()), "2STEP");
}

TEST(Passes, PipeDreamKeepsItsOwnSteps) {
  const auto generated = ps::generate("pipedream", {2, 2});
  const auto p = ps::insert_optimizer_step(generated);
  EXPECT_EQ(p, generated);
  EXPECT_EQ(row(p, 1), "1F0 1B0 1STEP0 1F1 1B1 1STEP1");
}

TEST(Passes, AreIdempotent) {
  for (const auto& g : ps::generators()) {
    const int V = g.virtual_stages ? 2 : 1;
    const auto once = ps::lower(ps::generate(g.name, {4, 8, V, ps::RecomputePolicy::Full}));
    EXPECT_EQ(ps::lower(once), once) << g.name;
  }
}

// PyTorch's meaning of a RECV: posted where it stands, waited for right
// before the compute that uses its data; one without a later consumer stays.
TEST(Passes, ReceivesMoveToJustBeforeTheComputeThatUsesThem) {
  auto p = ps::make_program("imported", 2, 1, 2, ps::RecomputePolicy::None);
  const auto parse = [](std::initializer_list<const char*> cells) {
    std::vector<ps::Action> out;
    for (const char* c : cells) out.push_back(ps::parse_action(c));
    return out;
  };
  p.ranks[0] = parse({"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0RECV_B1", "0B0", "0B1"});
  p.ranks[1] = parse({"1RECV_F0", "1RECV_F1", "1F0", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1", "1RECV_F9"});
  int moved = -1;
  const auto q = ps::receive_at_use(p, &moved);
  EXPECT_EQ(row(q, 0), "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1");
  EXPECT_EQ(row(q, 1), "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F9");
  EXPECT_EQ(moved, 2);  // 0RECV_B1 past 0B0; 1RECV_F1 past 1F0 (0RECV_B0 and 1RECV_F0 passed only receives)
  // Our own lowering already waits where the data is used: nothing moves.
  const auto lowered = ps::lower(ps::generate("1f1b", {4, 8}));
  EXPECT_EQ(ps::receive_at_use(lowered, &moved), lowered);
  EXPECT_EQ(moved, 0);
}

namespace {
// A rank's compute and FSDP actions, the rest left out.
std::string compute_and_fsdp(const ps::Program& p, int rank) {
  std::string out;
  for (const auto& a : p.ranks[rank]) {
    if (ps::is_compute(a.op) || ps::is_fsdp(a.op)) out += (out.empty() ? "" : " ") + ps::to_string(a);
  }
  return out;
}
}  // namespace

// PyTorch 2.13's runtime lowering of ScheduleLoopedBFS at K = 2, M = 2, V = 4
// (_prepare_schedule_with_comms: _add_unshard_reshard, 3 stages active),
// rank 0's compute and FSDP actions as it printed them: stage 0 is gathered
// twice, for its forwards and for its backwards. test_pytorch_orders.py holds
// every multi-stage class against PyTorch itself.
TEST(Passes, UnshardsAsPyTorchsRuntimePlacesThem) {
  const auto p = ps::insert_unshards(ps::lower(ps::generate("looped-bfs", {2, 2, 4})), 3);
  EXPECT_EQ(compute_and_fsdp(p, 0),
            "0UNSHARD 2UNSHARD 4UNSHARD 0F0 0F1 0RESHARD 6UNSHARD 2F0 2F1 4F0 4F1 6F0 6F1 6B1 6B0 6RESHARD 0UNSHARD "
            "4B1 4B0 4RESHARD 2B1 2B0 2RESHARD 0B1 0B0 0RESHARD");
  // Before the receives its compute waits at: 2F0's RECV_F follows 6UNSHARD.
  const std::string all = row(p, 0);
  EXPECT_NE(all.find("0RESHARD 6UNSHARD 2RECV_F0 2F0"), std::string::npos) << all;
  EXPECT_EQ(ps::insert_unshards(p, 3), p);  // a program with its own is kept
  EXPECT_THROW(ps::insert_unshards(p, 0), pipetwin::Error);
}

// Whatever the schedule and the bound: the program validates (every compute
// inside an UNSHARD .. RESHARD of its stage), at most N stages of a rank are
// gathered at once (an OVERLAP_F_B's may add one), and with N >= V each
// stage is gathered once a step.
TEST(Passes, UnshardsKeepAtMostNStagesGathered) {
  int checked = 0;
  for (const auto& [name, V] : {std::pair{"looped-bfs", 4}, std::pair{"interleaved-1f1b", 3}, std::pair{"zb-v", 2},
                                std::pair{"dualpipe-v", 2}, std::pair{"1f1b", 1}, std::pair{"interleaved-zb", 2}}) {
    for (const int N : {1, 2, 3, 4}) {
      const auto p = ps::insert_unshards(ps::lower(ps::generate(name, {4, 8, V})), N);
      ASSERT_NO_THROW(ps::validate(p)) << name << " N=" << N;
      for (int r = 0; r < p.num_ranks; ++r) {
        int gathered = 0, most = 0, unshards = 0;
        for (const auto& a : p.ranks[r]) {
          if (a.op == ps::Op::UNSHARD) ++gathered, ++unshards;
          if (a.op == ps::Op::RESHARD) --gathered;
          most = std::max(most, gathered);
        }
        EXPECT_EQ(gathered, 0) << name << " N=" << N << " rank " << r;
        EXPECT_LE(most, N + 1) << name << " N=" << N << " rank " << r;
        EXPECT_LE(most, V) << name << " N=" << N << " rank " << r;
        if (N >= V) {
          EXPECT_EQ(unshards, V) << name << " N=" << N << " rank " << r;
        } else {
          EXPECT_GT(unshards, V) << name << " N=" << N << " rank " << r;
        }
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 24);
}
