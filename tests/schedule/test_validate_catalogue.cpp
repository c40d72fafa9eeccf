// A catalogue of broken schedules. Each must be rejected with a ScheduleError
// naming the rank and step of the failing action, what was expected, and the
// grid with the failing row marked.
#include <gtest/gtest.h>

#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/validate.hpp"

namespace ps = pipetwin::schedule;

namespace {

struct Broken {
  std::string name;
  std::string text;  // pipetwin text form
  int rank;
  std::size_t step;
  std::string expected;  // substring of the one-line reason
};

const std::string kHeader2 = "ranks 2\nstages_per_rank 1\nmicrobatches 2\nstage_to_rank 0 1\n";

std::vector<Broken> catalogue() {
  return {
      {"missing_backward", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1SEND_B1\n",
       1, 5, "1F1 has no backward"},
      {"backward_before_forward", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1B0 1F0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 1, "1B0 comes before 1F0"},
      {"send_without_receive", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1F1 1B0 1SEND_B0 1B1 1SEND_B1\n",
       0, 3, "0SEND_F1 has no matching receive: expected 1RECV_F1 on rank 1"},
      {"receives_out_of_order_deadlock", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F1 1F1 1RECV_F0 1F0 1B0 1SEND_B0 1B1 1SEND_B1\n",
       0, 2, "deadlock"},
      {"stage_on_two_ranks", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 1F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1B1 1SEND_B1\n",
       0, 4, "stage 1 lives on rank 1, not on rank 0"},
      {"duplicate_forward", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 2, "duplicate"},
      {"input_grad_without_weight_grad", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1I0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 2, "1I0 has no weight gradient: expected 1W0"},
      {"microbatch_out_of_range", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0F2\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       0, 8, "micro-batch 2 does not exist"},
      {"send_past_the_last_stage", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1SEND_F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 2, "stage 1 is the last stage"},
      {"transfer_within_one_rank",
       "ranks 1\nstages_per_rank 2\nmicrobatches 1\nstage_to_rank 0 0\n"
       "rank 0: 0F0 0SEND_F0 1RECV_F0 1F0 1B0 0B0\n",
       0, 1, "stages 0 and 1 are both on rank 0"},
      {"forward_never_receives_its_input", kHeader2 +
           "rank 0: 0F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 0, "1F0 never receives its input: expected 1RECV_F0"},
      {"missing_recompute", kHeader2 + "recompute full\n"
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0R0 0RECV_B0 0B0 0R1 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1R0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 7, "expected 1R1 before 1B1"},
      {"recompute_the_policy_does_not_ask_for", kHeader2 + "recompute none\n"
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1R0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 2, "does not checkpoint"},
      {"step_before_the_last_backward", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0STEP 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1STEP\n",
       0, 6, "0STEP comes before 0B1"},
      // Found by fuzz_schedule_text: a compute-only program naming a stage past
      // the last was lowered (reading past the stage map) before being checked.
      {"stage_out_of_range_in_a_compute_only_program", kHeader2 + "recompute full\n"
           "rank 0: 0F0 0F1 0B0 0B1\n"
           "rank 1: 2F0 1B0 1F1 1B1\n",
       1, 0, "stage 2 does not exist"},
      {"microbatch_out_of_range_in_a_compute_only_program", kHeader2 +
           "rank 0: 0F0 0F1 0B0 0B1\n"
           "rank 1: 1F0 1B0 1F1 1B7\n",
       1, 3, "micro-batch 7 does not exist"},
      // PyTorch 2.13's Schedule1F1B._get_pipeline_order at K=2, M=2: its last rank's
      // forwards numbered 1..2. Without a header M is read as 3: the culprit is named.
      {"forwards_numbered_apart_from_backwards",
       "rank 0: 0F0 0F1 0B0 0B1\n"
       "rank 1: 1F1 1B0 1F2 1B1\n",
       1, 5, "1F2: stage 1 runs forwards of micro-batches 1..2 but backwards of 0..1 (numbered apart?)"},
      // FSDP's actions, as PyTorch's runtime checks them.
      {"compute_on_a_sharded_stage", kHeader2 +
           "rank 0: 0UNSHARD 0F0 0SEND_F0 0F1 0SEND_F1 0RESHARD 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       0, 7, "0B0 computes on stage 0 while its weights are sharded: expected 0UNSHARD before it"},
      {"unshard_twice", kHeader2 +
           "rank 0: 0UNSHARD 0F0 0SEND_F0 0UNSHARD 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0RESHARD\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       0, 3, "0UNSHARD: stage 0 is gathered already (since its UNSHARD at step 0)"},
      {"reshard_without_unshard", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1RESHARD 1UNSHARD 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1RESHARD\n",
       1, 0, "1RESHARD: stage 1 is not gathered: expected 1UNSHARD before it"},
      {"reshard_of_a_gather_nothing_waited_for", kHeader2 +
           "rank 0: 0UNSHARD 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1 0RESHARD 0UNSHARD 0RESHARD\n"
           "rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       0, 11, "0RESHARD: stage 0 has not computed since its UNSHARD at step 10"},
      {"unshard_left_gathered", kHeader2 +
           "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
           "rank 1: 1UNSHARD 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n",
       1, 0, "1UNSHARD has no RESHARD after it"},
  };
}

void PrintTo(const Broken& b, std::ostream* os) { *os << b.name; }

class Catalogue : public ::testing::TestWithParam<Broken> {};

}  // namespace

TEST_P(Catalogue, IsRejectedAtTheFailingStep) {
  const auto& b = GetParam();
  const auto program = ps::parse_text(b.text, b.name + ".txt");
  try {
    ps::validate(program);
    FAIL() << b.name << " was accepted";
  } catch (const ps::ScheduleError& e) {
    EXPECT_EQ(e.rank, ps::RankId{b.rank}) << e.what();
    EXPECT_EQ(e.step, b.step) << e.what();
    EXPECT_NE(e.reason.find(b.expected), std::string::npos) << e.what();
    const std::string message = e.what();
    EXPECT_NE(message.find("rank " + std::to_string(b.rank) + ", step " + std::to_string(b.step)), std::string::npos)
        << message;
    EXPECT_NE(message.find("<-- ERROR HERE"), std::string::npos) << message;
    EXPECT_NE(message.find("step " + std::to_string(b.step) + " "), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Broken, Catalogue, ::testing::ValuesIn(catalogue()),
                         [](const auto& info) { return info.param.name; });

TEST(Validate, DeadlockNamesEveryBlockedRankAndWhatItWaitsFor) {
  const auto program = ps::parse_text(catalogue()[3].text, "deadlock.txt");
  try {
    ps::validate(program);
    FAIL();
  } catch (const ps::ScheduleError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0, step 2 (0RECV_B0) waits for 1SEND_B0 from rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1, step 0 (1RECV_F1) waits for 0SEND_F1 from rank 0"), std::string::npos) << msg;
  }
}

TEST(Validate, AStageOnTwoRanksInAHeaderlessCsvIsCaught) {
  // A stage belongs to the first rank (in row order) that holds it: stage 1 is
  // first seen on rank 0, so rank 1's actions of stage 1 are the misplaced ones.
  const std::string csv = "0F0,0SEND_F0,1F0\n1RECV_F0,1F0,1B0,1SEND_B0\n";
  try {
    ps::validate(ps::parse_csv(csv, "two.csv"));
    FAIL();
  } catch (const ps::ScheduleError& e) {
    EXPECT_EQ(e.rank, ps::RankId{1});
    EXPECT_EQ(e.step, 0u);
    EXPECT_NE(e.reason.find("a stage cannot be on two ranks"), std::string::npos) << e.what();
  }
}

TEST(Validate, ShapeErrorsNameTheField) {
  auto p = ps::build_schedule("1f1b", {2, 2});
  p.stage_to_rank.pop_back();
  EXPECT_THROW(ps::validate(p), pipetwin::Error);
  p = ps::build_schedule("1f1b", {2, 2});
  p.stages_per_rank = 1 << 30;  // K x V past an int: refused before anything multiplies them
  try {
    ps::validate(p);
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 ranks x 1073741824 stages per rank is more than 1000000 stages"),
              std::string::npos)
        << e.what();
  }
  p = ps::build_schedule("1f1b", {2, 2});
  p.stage_to_rank[1] = ps::RankId{5};
  try {
    ps::validate(p);
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 is mapped to rank 5"), std::string::npos) << e.what();
  }
}

TEST(Validate, PartitionRangesMustTileTheLayers) {
  auto p = ps::build_schedule("1f1b", {2, 2});
  p.partition = {{0, 3}, {3, 6}};
  EXPECT_NO_THROW(ps::validate(p));
  p.partition = {{0, 3}, {4, 6}};
  try {
    ps::validate(p);
    FAIL();
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("partition of stage 1 is 4:6"), std::string::npos) << e.what();
  }
  p.partition = {{0, 3}, {3, 3}};
  EXPECT_THROW(ps::validate(p), pipetwin::Error);
}

TEST(Validate, ComputeOnlyProgramsAreLoweredThenValidated) {
  const auto report = ps::validate(ps::generate("1f1b", {4, 8}));
  EXPECT_TRUE(report.lowered);
  EXPECT_TRUE(report.program.has_transfers());
  EXPECT_DOUBLE_EQ(report.dry_run.timeline.makespan(), 22);
}
