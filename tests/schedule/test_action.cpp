// Action text form: round trips and parse errors.
#include <gtest/gtest.h>

#include "schedule/action.hpp"
#include "schedule/error.hpp"

namespace ps = pipetwin::schedule;

TEST(Action, TextFormOfEveryOpRoundTrips) {
  for (const char* text : {"2F0", "3SEND_F1", "1R4", "0B7", "5I12", "5W12", "4RECV_F3", "4RECV_B3", "6SEND_B0",
                           "0STEP", "3STEP9", "2REDUCE_GRAD", "10F100"}) {
    EXPECT_EQ(ps::to_string(ps::parse_action(text)), text);
  }
}

TEST(Action, ParsesFields) {
  const auto a = ps::parse_action("3SEND_F1");
  EXPECT_EQ(a.op, ps::Op::SEND_F);
  EXPECT_EQ(a.stage, ps::StageId{3});
  ASSERT_TRUE(a.microbatch.has_value());
  EXPECT_EQ(*a.microbatch, ps::MicrobatchId{1});
  EXPECT_FALSE(ps::parse_action("0STEP").microbatch.has_value());
}

TEST(Action, RejectsMalformedTextWithTheTextInTheMessage) {
  for (const char* bad : {"", "F0", "2X0", "2F", "2F0x", "-1F0", "2SEND0", "2f0"}) {
    try {
      ps::parse_action(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const pipetwin::Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Action, Classification) {
  EXPECT_TRUE(ps::is_compute(ps::Op::R));
  EXPECT_FALSE(ps::is_compute(ps::Op::STEP));
  EXPECT_TRUE(ps::is_send(ps::Op::SEND_B));
  EXPECT_TRUE(ps::is_recv(ps::Op::RECV_F));
  EXPECT_TRUE(ps::is_stage_level(ps::Op::REDUCE_GRAD));
  EXPECT_FALSE(ps::is_transfer(ps::Op::F));
}
