// The lowering passes: what each inserts, where, and that each is idempotent.
#include <gtest/gtest.h>

#include "schedule/generators.hpp"
#include "schedule/passes.hpp"

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
