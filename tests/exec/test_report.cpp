// How rank 0 assembles the ranks' reports (exec/report.hpp), without
// processes: steps begin with their first computation, the median step is
// picked past the warm-up, and the stages' measured memory is gathered.
#include <gtest/gtest.h>

#include "exec/report.hpp"
#include "schedule/action.hpp"
#include "schedule/error.hpp"

namespace pe = pipetwin::exec;
namespace ps = pipetwin::schedule;

namespace {

ps::TimedAction at(const char* action, double start, double end) { return {ps::parse_action(action), start, end}; }

// Rank r's report: one timeline per step, only rank r filled.
pe::RankReport report(int rank, std::vector<std::vector<ps::TimedAction>> steps) {
  pe::RankReport r;
  r.rank = rank;
  for (auto& s : steps) {
    ps::Timeline t;
    t.ranks.resize(2);
    t.ranks[rank] = std::move(s);
    r.steps.push_back(std::move(t));
  }
  r.stage_peak_stash_bytes = {{rank, 100.0 * (rank + 1)}};
  r.stage_peak_versions = {{rank, rank + 1}};
  return r;
}

}  // namespace

TEST(Report, StepsBeginWithTheirFirstComputation) {
  // Rank 1 waits in its receive from 9.0, before rank 0's first forward at 10.0.
  auto r0 = report(0, {{at("0F0", 10.0, 11.0), at("0SEND_F0", 11.0, 11.1), at("0RECV_B0", 11.1, 14.0), at("0B0", 14.0, 15.0)}});
  auto r1 = report(1, {{at("1RECV_F0", 9.0, 11.2), at("1F0", 11.2, 12.2), at("1B0", 12.2, 13.2), at("1SEND_B0", 13.2, 13.3)}});
  const auto run = pe::assemble({r1, r0}, 2);
  ASSERT_EQ(run.steps.size(), 1u);
  EXPECT_DOUBLE_EQ(run.step_times_s[0], 5.0);
  EXPECT_DOUBLE_EQ(run.steps[0].ranks[1][0].start, 0.0);  // clipped to the step's start
  EXPECT_NEAR(run.steps[0].ranks[1][0].end, 1.2, 1e-12);
  EXPECT_DOUBLE_EQ(run.steps[0].ranks[0][0].start, 0.0);
  EXPECT_EQ(run.ranks[0].rank, 0);  // sorted by rank
  EXPECT_EQ(run.stage_peak_stash_bytes, (std::vector<double>{100.0, 200.0}));
  EXPECT_EQ(run.stage_weight_versions, (std::vector<int>{1, 2}));
}

TEST(Report, TheMedianStepLeavesTheWarmUpOut) {
  std::vector<std::vector<ps::TimedAction>> s0, s1;
  const std::vector<double> lengths{9.0, 2.0, 4.0, 3.0};  // step 0 is the slow warm-up
  double t = 0;
  for (const double d : lengths) {
    s0.push_back({at("0F0", t, t + d)});
    s1.push_back({at("1F0", t, t + d / 2)});
    t += d;
  }
  const auto run = pe::assemble({report(0, s0), report(1, s1)}, 2);
  EXPECT_EQ(run.step_times_s, lengths);
  EXPECT_EQ(run.representative_step, 3);  // median of 2, 4, 3
  EXPECT_DOUBLE_EQ(run.wall_s, 18.0);
}

TEST(Report, RanksWithDifferentStepCountsAreRefused) {
  EXPECT_THROW(pe::assemble({report(0, {{at("0F0", 0, 1)}}), report(1, {{at("1F0", 0, 1)}, {at("1F0", 1, 2)}})}, 2),
               pipetwin::Error);
}

TEST(Report, ReportsRoundTripThroughJson) {
  auto r = report(1, {{at("1RECV_F0", 9.0, 11.2), at("1F0", 11.2, 12.2)}});
  r.host = "10.0.0.2";
  r.losses = {2.5, 2.25};
  r.peak_rss_bytes = 123456789;
  const auto back = pe::RankReport::from_json(r.to_json());
  EXPECT_EQ(back.to_json(), r.to_json());
  EXPECT_EQ(back.steps[0].ranks[1][1].action, ps::parse_action("1F0"));
}
