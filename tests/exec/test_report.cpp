// How rank 0 assembles the ranks' reports (exec/report.hpp), without
// processes: steps begin with their first computation, the median step is
// picked past the warm-up, and the stages' measured memory is gathered.
#include <gtest/gtest.h>

#include <cmath>

#include "exec/host_load.hpp"
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

// Two ranks, one forward each per step, the steps of `lengths` back to back
// (rank 1's forward half as long), assembled.
pe::RunResult run_of_steps(const std::vector<double>& lengths) {
  std::vector<std::vector<ps::TimedAction>> s0, s1;
  double t = 0;
  for (const double d : lengths) {
    s0.push_back({at("0F0", t, t + d)});
    s1.push_back({at("1F0", t, t + d / 2)});
    t += d;
  }
  return pe::assemble({report(0, s0), report(1, s1)}, 2);
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
  const std::vector<double> lengths{9.0, 2.0, 4.0, 3.0};  // step 0 is the slow warm-up
  const auto run = run_of_steps(lengths);
  EXPECT_EQ(run.step_times_s, lengths);
  EXPECT_EQ(run.representative_step, 3);  // median of 2, 4, 3
  EXPECT_DOUBLE_EQ(run.wall_s, 18.0);
  EXPECT_EQ(run.noise.first_counted_step, 1);
}

// From five steps on, the second is warm-up too: the median of steps 2-5.
TEST(Report, FromFiveStepsTheFirstTwoAreWarmUp) {
  EXPECT_EQ(pe::warmup_steps(1), 0);
  EXPECT_EQ(pe::warmup_steps(2), 1);
  EXPECT_EQ(pe::warmup_steps(4), 1);
  EXPECT_EQ(pe::warmup_steps(5), 2);
  EXPECT_EQ(pe::warmup_steps(12), 2);
  const auto run = run_of_steps({9.0, 1.0, 4.0, 3.0, 5.0, 2.0});  // step 1 is the fastest, but warm-up
  EXPECT_EQ(run.representative_step, 3);  // the lower median of 4, 3, 5, 2
  EXPECT_EQ(run.noise.first_counted_step, 2);
  EXPECT_EQ(run.noise.counted_steps, 4);
  EXPECT_DOUBLE_EQ(run.noise.step_median_s, 3.5);
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
  r.heap = "keep";
  r.sched_slice_s = 1.5e-3;
  r.gloo_backoffs = 67;
  pe::HostSample sample;
  sample.cpus = 2;
  sample.minor_faults = 4321;
  r.host_samples = {sample, sample};
  const auto back = pe::RankReport::from_json(r.to_json());
  EXPECT_EQ(back.to_json(), r.to_json());
  EXPECT_EQ(back.heap, "keep");
  EXPECT_EQ(back.sched_slice_s, 1.5e-3);
  EXPECT_EQ(back.gloo_backoffs, 67);
  EXPECT_EQ(back.host_samples.at(1).minor_faults, 4321);
  EXPECT_EQ(back.steps[0].ranks[1][1].action, ps::parse_action("1F0"));
}

// /proc/stat, /proc/loadavg and /proc/cpuinfo as Linux writes them.
TEST(HostLoad, AReadingParsesTheKernelsCounters) {
  const char* stat =
      "cpu  1000 200 300 4000 50 6 7 80 0 0\n"
      "cpu0 500 100 150 2000 25 3 4 40 0 0\n"
      "cpu1 500 100 150 2000 25 3 3 40 0 0\n"
      "intr 12345\nctxt 678\n";
  const auto s = pe::parse_host_sample(stat, "0.41 1.38 1.80 3/88 17822\n",
                                       "processor\t: 0\ncpu MHz\t\t: 2000.0\nprocessor\t: 1\ncpu MHz\t\t: 3000.0\n", 1.5, 100);
  EXPECT_EQ(s.cpus, 2);
  EXPECT_DOUBLE_EQ(s.busy_s, (1000 + 200 + 300 + 6 + 7) / 100.0);
  EXPECT_DOUBLE_EQ(s.steal_s, 0.8);
  EXPECT_DOUBLE_EQ(s.total_s, (1000 + 200 + 300 + 4000 + 50 + 6 + 7 + 80) / 100.0);
  EXPECT_DOUBLE_EQ(s.own_cpu_s, 1.5);
  EXPECT_DOUBLE_EQ(s.load1, 0.41);
  EXPECT_DOUBLE_EQ(s.mhz, 2500.0);
  const auto round_trip = pe::HostSample::from_json(s.to_json());
  EXPECT_DOUBLE_EQ(round_trip.total_s, s.total_s);
  EXPECT_THROW(pe::parse_host_sample("intr 1\n", "", "", 0, 100), pipetwin::Error);
  EXPECT_THROW(pe::parse_host_sample("cpu 1 2\n", "", "", 0, 100), pipetwin::Error);
  // This machine's own counters read, and move forward.
  const auto a = pe::sample_host(true);
  ASSERT_GT(a.cpus, 0);
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + 1e-9 * i;
  const auto b = pe::sample_host(false);
  EXPECT_GT(b.own_cpu_s, a.own_cpu_s);
  EXPECT_GE(b.total_s, a.total_s);
  EXPECT_EQ(b.mhz, 0.0);  // the clock not read
}

namespace {

// A host of 2 CPUs read by two ranks at the start and after each of 4 steps
// of 1 s: each step the host is busy `busy[s]` CPU-seconds, each rank uses
// `own` of them, the hypervisor steals `steal[s]`.
std::vector<std::vector<pe::HostSample>> host_readings(const std::vector<double>& busy, const std::vector<double>& steal,
                                                       double own) {
  std::vector<std::vector<pe::HostSample>> out(2);
  for (int r = 0; r < 2; ++r) {
    pe::HostSample s;
    s.cpus = 2;
    s.load1 = 1.0;
    s.mhz = 2000;
    out[r].push_back(s);
    for (std::size_t i = 0; i < busy.size(); ++i) {
      s.busy_s += busy[i];
      s.steal_s += steal[i];
      s.total_s += 2.0;
      s.own_cpu_s += own;
      s.load1 += 0.5;
      out[r].push_back(s);
    }
  }
  return out;
}

}  // namespace

TEST(HostLoad, OtherProcessesAreTheBusyTimeTheRanksDoNotAccountFor) {
  // Step 0 (warm-up) is left out of the run's shares: steps 1-3 have
  // 1.8 + 1.2 + 1.6 busy, the ranks 3 x 2 x 0.6 of it, 0.3 s stolen.
  auto readings = host_readings({2.0, 1.8, 1.2, 1.6}, {0.0, 0.1, 0.2, 0.0}, 0.6);
  readings[0][1].mhz = 1800;  // the clock moved
  readings[0][2].mhz = 0;     // and was not read here
  // Page faults: rank 0 takes 1000 in the warm-up and 30 a step after it, rank 1 10 a step.
  for (int i = 0; i < 5; ++i) {
    readings[0][i].minor_faults = i == 0 ? 0 : 1000 + 30 * (i - 1);
    readings[1][i].minor_faults = 10 * i;
  }
  const auto n = pe::measure_noise(readings, {"a", "a"}, {1.5, 1.0, 1.2, 1.1});
  ASSERT_EQ(n.hosts.size(), 1u);
  const auto& h = n.hosts[0];
  EXPECT_EQ(h.ranks, 2);
  EXPECT_EQ(h.cpus, 2);
  EXPECT_NEAR(h.capacity_s, 6.0, 1e-12);
  EXPECT_NEAR(h.ranks_share, 3.6 / 6.0, 1e-12);
  EXPECT_NEAR(h.other_share, (4.6 - 3.6) / 6.0, 1e-12);
  EXPECT_NEAR(h.steal_share, 0.3 / 6.0, 1e-12);
  EXPECT_NEAR(h.share_resolution, 2 * 2 * 0.01 / 6.0, 1e-12);  // a tick per CPU at each end
  ASSERT_EQ(h.step_other_share.size(), 4u);
  EXPECT_NEAR(h.step_other_share[0], 0.8 / 2.0, 1e-12);
  EXPECT_NEAR(h.step_other_share[2], 0.0, 1e-12);  // busy 1.2 = the ranks' own: nothing else ran
  EXPECT_DOUBLE_EQ(h.load1_start, 1.5);            // at the first counted step
  EXPECT_DOUBLE_EQ(h.load1_end, 3.0);
  EXPECT_DOUBLE_EQ(h.mhz_min, 1800.0);  // the unread 0 left out
  EXPECT_DOUBLE_EQ(h.mhz_max, 2000.0);
  EXPECT_NEAR(h.faults_per_step, 30 + 10, 1e-12);  // both ranks, the warm-up's left out
  EXPECT_EQ(n.first_counted_step, 1);
  EXPECT_EQ(n.counted_steps, 3);
  EXPECT_NEAR(n.other_share, h.other_share, 1e-12);
  // Counted steps 1.0, 1.2, 1.1: median 1.1, deviations 0.1, 0.1, 0 -> MAD 0.1.
  EXPECT_NEAR(n.step_median_s, 1.1, 1e-12);
  EXPECT_NEAR(n.step_mad_s, 0.1, 1e-12);
  EXPECT_NEAR(n.median_uncertainty_rel, 1.96 * 1.2533 * 1.4826 * 0.1 / std::sqrt(3.0) / 1.1, 1e-12);
}

TEST(HostLoad, TheComputeCpuTimeIsSummedOverRanksAndItsMedianOverTheCountedSteps) {
  const auto readings = host_readings({1.0, 1.0, 1.0, 1.0, 1.0}, {0, 0, 0, 0, 0}, 0.4);
  // 5 steps: the first two are the warm-up.
  const auto n = pe::measure_noise(readings, {"a", "a"}, {1, 1, 1, 1, 1},
                                   {{0.9, 0.5, 0.4, 0.6, 0.5}, {0.8, 0.4, 0.3, 0.3, 0.2}});
  ASSERT_EQ(n.step_compute_cpu_s.size(), 5u);
  EXPECT_NEAR(n.step_compute_cpu_s[0], 1.7, 1e-12);
  EXPECT_NEAR(n.compute_cpu_median_s, 0.7, 1e-12);  // of 0.7, 0.9, 0.7; the warm-up's 1.7 and 0.9 left out
  EXPECT_NEAR(n.compute_cpu_mad_s, 0.0, 1e-12);     // deviations 0, 0.2, 0
  EXPECT_NEAR(n.to_json()["compute_cpu_median_s"].get<double>(), 0.7, 1e-12);
  // A rank that did not measure it (CUDA): the run has no figure, not a partial sum.
  const auto partial = pe::measure_noise(readings, {"a", "a"}, {1, 1, 1, 1, 1}, {{0.9, 0.5, 0.4, 0.6, 0.5}, {}});
  EXPECT_TRUE(partial.step_compute_cpu_s.empty());
  EXPECT_EQ(partial.compute_cpu_median_s, 0.0);
}

TEST(HostLoad, RanksOnTwoHostsAreCountedPerHostAndTheWorstIsTheRuns) {
  // Host a is busy 1.2 a step of which its one rank (0) uses 0.6; host b
  // 2.0, its rank (1) 0.6.
  auto readings = host_readings({1.2, 1.2, 1.2}, {0, 0, 0}, 0.6);
  auto other = host_readings({2.0, 2.0, 2.0}, {0, 0, 0}, 0.6);
  readings[1] = other[1];
  const auto n = pe::measure_noise(readings, {"a", "b"}, {1.0, 1.0, 1.0});
  ASSERT_EQ(n.hosts.size(), 2u);
  EXPECT_NEAR(n.hosts[0].other_share, (1.2 - 0.6) / 2.0, 1e-12);
  EXPECT_NEAR(n.hosts[1].other_share, (2.0 - 0.6) / 2.0, 1e-12);
  EXPECT_NEAR(n.other_share, 0.7, 1e-12);
  EXPECT_EQ(n.median_uncertainty_rel, 0.0);  // 2 counted steps: unknown
}

TEST(HostLoad, ReadingsThatDoNotCoverTheStepsAreRefusedNamingTheRank) {
  auto readings = host_readings({1.0, 1.0}, {0, 0}, 0.5);
  readings[1].pop_back();
  try {
    pe::measure_noise(readings, {"a", "a"}, {1.0, 1.0});
    FAIL() << "accepted";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 reported 2 host readings for 2 steps"), std::string::npos) << e.what();
  }
  readings[1].clear();  // no readings (no /proc here): the host is left out, not refused
  const auto n = pe::measure_noise(readings, {"a", "b"}, {1.0, 1.0});
  EXPECT_EQ(n.hosts.size(), 1u);
}
