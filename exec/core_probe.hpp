// Whether a host gives its processes the cores it shows. The same compute
// kernel is timed on each of N threads alone (each pinned to its CPU), then on
// the N at once, round after round: on N free cores each keeps its pace. A
// hypervisor that backs the guest's virtual CPUs with fewer cores than it
// shows (hyper-thread siblings, or time-sharing one core) slows them together
// and not the one alone, and /proc/stat need not show it: its steal counts
// only the time the hypervisor reports. Measured on this project's 2-core
// machine (`pipetwin probe --rounds 60`, docs/calibration.md "The host's
// cores, probed"): two threads together had 1.98 cores' pace in the median
// round, under 1.80 in 9 of 60 (the least 1.18), and a core's pace alone
// ranged 1900-3510 iterations/s (24 of 120 under 90% of the median), with
// /proc/stat showing no steal. Torch-free: the `pipetwin` binary runs it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pipetwin::exec {

// One round: the kernel's iterations per second on each thread alone (one at
// a time, each pinned to its CPU), then on every thread at once, and what
// /proc/stat saw over the latter.
struct ProbeRound {
  std::vector<double> alone_per_s;     // one per thread, each alone on its CPU
  std::vector<double> together_per_s;  // one per thread, all at once
  double steal_share = 0;              // of the host's CPU time over the together phase
  double other_share = 0;              // busy time that is not this process's
  // How many cores the threads had: each thread's pace together over its
  // reference, summed. The reference is its pace alone, or its pace
  // together where that was faster: a thread that ran faster beside the
  // others than alone had its alone phase disturbed (one fresh clone of this
  // project read 3.40 "cores" of 2 in every round of a probe before that
  // reference), and a core cannot give more than its own pace.
  double cores_delivered() const;
  // Whether some thread ran under kShort of its pace together while alone.
  bool alone_disturbed() const;
};

struct CoreProbe {
  int threads = 0;  // at once
  int cpus = 0;     // the host's, as /proc/stat counts them (0: unread)
  double seconds = 0;  // each phase of a round
  std::vector<ProbeRound> rounds;

  // Alone: the median pace, its spread (max/min over every thread and
  // round) and how many measurements fell under `fraction` of the median. A
  // core's pace swings with what the host runs beside it (on this project's
  // machine 1.8x from one round to the next, nothing else running in it).
  double alone_median() const;
  double alone_spread() const;
  int slow_alone(double fraction = kShort) const;
  double median_delivered() const;
  double least_delivered() const;
  // Rounds that delivered less than `fraction` of `threads` cores. 0.9 by
  // default: on the 2-core machine the middle 80% of 60 rounds delivered
  // 1.83-2.21 cores (the pace alone and together are each timed to a few
  // percent); under 1.80 the host took a share of a core.
  int short_rounds(double fraction = kShort) const;
  // Rounds whose alone phase was disturbed (ProbeRound::alone_disturbed).
  int disturbed_rounds() const;
  double steal_share() const;  // the median round's
  double other_share() const;
  nlohmann::json to_json() const;
  // One line: the median, the short rounds, the least, steal and others.
  std::string summary() const;

  static constexpr double kShort = 0.9;
};

// `rounds` rounds of `seconds` alone then `seconds` together on `threads`
// threads. Throws pipetwin::Error for threads < 1, rounds < 1 or seconds
// outside (0, 10].
CoreProbe probe_cores(int threads, int rounds, double seconds);

// The CPUs /proc/stat counts on this host (0 where it cannot be read).
int host_cpus();

// How long Linux's scheduler lets a CPU-bound task run before another
// runnable one on its CPU gets it, in seconds: `base_slice_ns`, the text of
// /sys/kernel/debug/sched/base_slice_ns, where it could be read; else, on a
// kernel of EEVDF (release 6.6 and later), its default, 0.75 ms x (1 +
// log2 of the online CPUs, at most 8): 1.5 ms on two CPUs; else 0 (unknown:
// the older scheduler's slice depends on how many tasks share the CPU).
// Throws pipetwin::Error for online_cpus < 1.
double scheduler_slice_s(std::string_view kernel_release, int online_cpus, std::string_view base_slice_ns = "");
// This host's (uname, sysconf, debugfs where readable).
double host_scheduler_slice_s();

}  // namespace pipetwin::exec
