// The host's cores, probed (exec/core_probe.hpp): the summary's arithmetic on
// rounds of known paces, the refusals, and a real probe of this host.
#include <gtest/gtest.h>

#include <string>

#include "exec/core_probe.hpp"
#include "schedule/error.hpp"

namespace pe = pipetwin::exec;

namespace {

pe::ProbeRound round_of(std::vector<double> alone, std::vector<double> together) {
  pe::ProbeRound r;
  r.alone_per_s = std::move(alone);
  r.together_per_s = std::move(together);
  return r;
}

}  // namespace

TEST(CoreProbe, CoresDeliveredAreTheThreadsPaceTogetherOverTheirPaceAlone) {
  pe::CoreProbe p;
  p.threads = 2;
  // Two cores of their own; one core's worth shared (hyper-thread siblings);
  // a round whose CPUs ran slower alone too.
  p.rounds = {round_of({3400, 3400}, {3400, 3400}), round_of({3400, 3400}, {1870, 1870}),
              round_of({3400, 1700}, {2550, 2550})};
  EXPECT_DOUBLE_EQ(p.rounds[0].cores_delivered(), 2.0);
  EXPECT_DOUBLE_EQ(p.rounds[1].cores_delivered(), 1.1);
  EXPECT_DOUBLE_EQ(p.rounds[2].cores_delivered(), 2.0);  // against the round's own pace alone
  EXPECT_DOUBLE_EQ(p.median_delivered(), 2.0);
  EXPECT_DOUBLE_EQ(p.least_delivered(), 1.1);
  EXPECT_EQ(p.short_rounds(), 1);
  EXPECT_DOUBLE_EQ(p.alone_median(), 3400);
  EXPECT_DOUBLE_EQ(p.alone_spread(), 2.0);
  EXPECT_EQ(p.slow_alone(), 1);
  const auto j = p.to_json();
  EXPECT_EQ(j.at("short_rounds").get<int>(), 1);
  EXPECT_EQ(j.at("rounds").size(), 3u);
  EXPECT_DOUBLE_EQ(j.at("cores_delivered_least").get<double>(), 1.1);
  const std::string s = p.summary();
  EXPECT_NE(s.find("median 2.00 of 2"), std::string::npos) << s;
  EXPECT_NE(s.find("1 of 3 rounds under 1.80"), std::string::npos) << s;
  EXPECT_NE(s.find("spread 2.00x"), std::string::npos) << s;
}

TEST(CoreProbe, RefusesNoThreadsNoRoundsAndPhasesOutOfRange) {
  EXPECT_THROW(pe::probe_cores(0, 1, 0.01), pipetwin::Error);
  EXPECT_THROW(pe::probe_cores(1, 0, 0.01), pipetwin::Error);
  EXPECT_THROW(pe::probe_cores(1, 1, 0), pipetwin::Error);
  EXPECT_THROW(pe::probe_cores(1, 1, 11), pipetwin::Error);
  try {
    pe::probe_cores(1, 1, -1);
    FAIL() << "no error";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--seconds"), std::string::npos) << e.what();
  }
}

TEST(CoreProbe, ProbesThisHost) {
  const pe::CoreProbe p = pe::probe_cores(2, 2, 0.02);
  ASSERT_EQ(p.rounds.size(), 2u);
  EXPECT_EQ(p.threads, 2);
  for (const auto& r : p.rounds) {
    ASSERT_EQ(r.alone_per_s.size(), 2u);
    ASSERT_EQ(r.together_per_s.size(), 2u);
    for (const double a : r.alone_per_s) EXPECT_GT(a, 0);
    for (const double t : r.together_per_s) EXPECT_GT(t, 0);
    // Not bounded above: a core's pace alone may drop between the phases
    // (the host's other work), which is what the probe is for.
    EXPECT_GT(r.cores_delivered(), 0);
    EXPECT_GE(r.steal_share, 0);
    EXPECT_GE(r.other_share, 0);
  }
  if (pe::host_cpus() > 0) {
    EXPECT_EQ(p.cpus, pe::host_cpus());
  }
}
