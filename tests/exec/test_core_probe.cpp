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

TEST(CoreProbe, CoresDeliveredAreEachThreadsPaceTogetherOverItsPaceAlone) {
  pe::CoreProbe p;
  p.threads = 2;
  // Two cores of their own; one core's worth shared (hyper-thread siblings);
  // a slower CPU, each thread against its own pace alone; both alone phases
  // disturbed (slower alone than together: the pace together is the
  // reference, not 3.4 "cores" of 2); one thread's alone phase disturbed and
  // the other slowed by a quarter together.
  p.rounds = {round_of({3400, 3400}, {3400, 3400}), round_of({3400, 3400}, {1870, 1870}),
              round_of({3400, 1700}, {3400, 1700}), round_of({1000, 1000}, {1700, 1700}),
              round_of({3400, 1700}, {2550, 2550})};
  EXPECT_DOUBLE_EQ(p.rounds[0].cores_delivered(), 2.0);
  EXPECT_DOUBLE_EQ(p.rounds[1].cores_delivered(), 1.1);
  EXPECT_DOUBLE_EQ(p.rounds[2].cores_delivered(), 2.0);
  EXPECT_DOUBLE_EQ(p.rounds[3].cores_delivered(), 2.0);
  EXPECT_DOUBLE_EQ(p.rounds[4].cores_delivered(), 1.75);
  EXPECT_FALSE(p.rounds[0].alone_disturbed());
  EXPECT_FALSE(p.rounds[1].alone_disturbed());
  EXPECT_FALSE(p.rounds[2].alone_disturbed());
  EXPECT_TRUE(p.rounds[3].alone_disturbed());
  EXPECT_TRUE(p.rounds[4].alone_disturbed());
  EXPECT_EQ(p.disturbed_rounds(), 2);
  EXPECT_DOUBLE_EQ(p.median_delivered(), 2.0);
  EXPECT_DOUBLE_EQ(p.least_delivered(), 1.1);
  EXPECT_EQ(p.short_rounds(), 2);
  EXPECT_DOUBLE_EQ(p.alone_median(), 3400);
  EXPECT_DOUBLE_EQ(p.alone_spread(), 3.4);
  EXPECT_EQ(p.slow_alone(), 4);
  const auto j = p.to_json();
  EXPECT_EQ(j.at("short_rounds").get<int>(), 2);
  EXPECT_EQ(j.at("disturbed_rounds").get<int>(), 2);
  EXPECT_EQ(j.at("rounds").size(), 5u);
  EXPECT_TRUE(j.at("rounds").at(3).at("alone_disturbed").get<bool>());
  EXPECT_DOUBLE_EQ(j.at("cores_delivered_least").get<double>(), 1.1);
  const std::string s = p.summary();
  EXPECT_NE(s.find("median 2.00 of 2"), std::string::npos) << s;
  EXPECT_NE(s.find("2 of 5 rounds under 1.80"), std::string::npos) << s;
  EXPECT_NE(s.find("spread 3.40x"), std::string::npos) << s;
  EXPECT_NE(s.find("in 2 of 5 a thread ran faster together than alone"), std::string::npos) << s;
  // Without a disturbed round the summary does not mention it.
  p.rounds.resize(3);
  EXPECT_EQ(p.summary().find("faster together"), std::string::npos) << p.summary();
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
    // Each thread gives at most its own core: the reference is the faster
    // of its pace alone and together.
    EXPECT_GT(r.cores_delivered(), 0);
    EXPECT_LE(r.cores_delivered(), 2.0 + 1e-12);
    EXPECT_GE(r.steal_share, 0);
    EXPECT_GE(r.other_share, 0);
  }
  if (pe::host_cpus() > 0) {
    EXPECT_EQ(p.cpus, pe::host_cpus());
  }
}

TEST(SchedulerSlice, EevdfDefaultScalesWithTheLogOfTheOnlineCpusUpToEight) {
  // kernel/sched/fair.c since 6.6: 0.75 ms x (1 + ilog2(min(CPUs, 8))).
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.18.44-fc-v657", 2), 1.5e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.6.0", 1), 0.75e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.8.0-45-generic", 3), 1.5e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.8.0", 4), 2.25e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.8.0", 7), 2.25e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("7.0.1", 8), 3e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.12.1", 192), 3e-3);
  // CFS (before 6.6): its slice depends on how many tasks share the CPU; unknown.
  EXPECT_EQ(pe::scheduler_slice_s("6.5.13", 2), 0);
  EXPECT_EQ(pe::scheduler_slice_s("5.15.0-105-generic", 16), 0);
  EXPECT_EQ(pe::scheduler_slice_s("not a release", 2), 0);
  // debugfs's value, where it could be read, over the default (already scaled there).
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.18.0", 2, "3000000\n"), 3e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("5.10.0", 2, "750000"), 0.75e-3);
  EXPECT_DOUBLE_EQ(pe::scheduler_slice_s("6.18.0", 2, "garbage"), 1.5e-3);
  EXPECT_THROW(pe::scheduler_slice_s("6.18.0", 0), pipetwin::Error);
  // This host's: a slice of a millisecond or a few, or unknown.
  const double here = pe::host_scheduler_slice_s();
  EXPECT_TRUE(here == 0 || (here >= 0.1e-3 && here <= 50e-3)) << here;
}
