// What else used a host's CPUs while a run measured its steps. Each rank
// reads /proc/stat (every CPU of its host), /proc/loadavg, /proc/cpuinfo and
// its own CPU time (all its threads) when its steps begin and at the end of
// each step; rank 0 turns the readings into, per host, the share of the
// host's CPU time that neither its ranks nor idleness account for (other
// processes, the launcher, the kernel's work for them), the share the
// hypervisor took (steal), the load and the clock, for the run and for each
// step. Torch-free: exec/report.cpp and the tests use it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pipetwin::exec {

// One reading. Host times are summed over the host's CPUs, since boot.
struct HostSample {
  int cpus = 0;             // cpuN lines of /proc/stat
  double busy_s = 0;        // user + nice + system + irq + softirq (guest time is inside user)
  double steal_s = 0;       // a virtual CPU ready to run while the hypervisor ran something else
  double total_s = 0;       // busy + idle + iowait + steal: the host's CPU capacity so far
  double own_cpu_s = 0;     // this process, user + system, every thread (getrusage)
  double minor_faults = 0;  // this process's page faults so far served without I/O (getrusage)
  double load1 = 0;         // 1-minute load average
  double mhz = 0;           // mean "cpu MHz" of /proc/cpuinfo; 0 where it says none, or unread
  double tick_s = 0.01;     // the unit of /proc/stat's counters (1 / sysconf(_SC_CLK_TCK))
  nlohmann::json to_json() const;
  static HostSample from_json(const nlohmann::json& j);
};

// One host's CPU time between two readings: its capacity (wall time x
// CPUs), busy and steal time, and own_s the CPU time of the processes whose
// readings these are; other() is the busy share that is not theirs.
struct HostWindow {
  double capacity_s = 0, busy_s = 0, steal_s = 0, own_s = 0;
  // From one process's two readings (own_s its own CPU time between them).
  static HostWindow between(const HostSample& from, const HostSample& to);
  double other() const;
  double steal() const;
};

// Parses the three files' texts (/proc/stat, /proc/loadavg, /proc/cpuinfo;
// the last two may be empty) with `ticks_per_s` (sysconf(_SC_CLK_TCK)).
// Throws pipetwin::Error naming what is malformed.
HostSample parse_host_sample(std::string_view proc_stat, std::string_view loadavg, std::string_view cpuinfo,
                             double own_cpu_s, double ticks_per_s);
// This host and process now; a host without /proc/stat gives cpus = 0.
// `with_clock` also reads /proc/cpuinfo (mhz; 0 without it): slow on hosts
// of many CPUs, where the kernel samples each one's clock, so runs read it
// when their steps begin and after the last, not between steps.
HostSample sample_host(bool with_clock);
// The calling thread's CPU time so far (CLOCK_THREAD_CPUTIME_ID), in seconds.
double thread_cpu_seconds();

// One host over the counted steps (all but the warm-up, warmup_steps()).
struct HostLoad {
  std::string host;
  int ranks = 0, cpus = 0;
  double capacity_s = 0;    // CPU time the host had: wall time x CPUs
  double ranks_share = 0;   // of capacity_s: the ranks' own CPU time
  double other_share = 0;   // busy time that is not the ranks' (0 where the counters disagree below it)
  double steal_share = 0;
  // How finely the shares are known: the kernel counts each CPU's time in
  // ticks, one tick per CPU at each end of the window, over the capacity.
  double share_resolution = 0;
  double load1_start = 0, load1_end = 0;
  double mhz_min = 0, mhz_max = 0;  // over the readings that have it; 0: not shown
  // The ranks' page faults per counted step, all of them on this host: memory
  // the kernel had to map (and zero) again, e.g. heap given back and taken
  // again (`pipetwin run --malloc system`).
  double faults_per_step = 0;
  std::vector<double> step_other_share;  // every step, the warm-up included
  std::vector<double> step_steal_share;
};

// The steps a run leaves out as warm-up: the first two from 5 steps on, the
// first alone from 2, none of one. Measured on this project's 2-core machine
// over 534 runs of transformer-small (scripts/bench_fidelity.sh's and
// demo.sh's, docs/calibration.md "Noise"): the median run's first step took
// 1.31-1.40 times its steady steps (the 5th on), its second 1.05-1.11 times,
// its third 1.01-1.05 and the later ones 1.00.
int warmup_steps(int steps);

// What disturbed the run, and how well its steps pin the median step.
struct RunNoise {
  std::vector<HostLoad> hosts;
  int first_counted_step = 0;
  int counted_steps = 0;
  double other_share = 0, steal_share = 0;  // the worst host
  double share_resolution = 0;              // the coarsest host's
  double step_median_s = 0, step_min_s = 0, step_max_s = 0;
  double step_mad_s = 0;  // median absolute deviation of the counted steps
  // Half-width of a 95% interval of the median step, relative to it: the
  // median of n normal samples has standard error 1.2533 sigma / sqrt(n),
  // sigma estimated as 1.4826 MAD; 0 with fewer than 3 counted steps
  // (unknown, said as such).
  double median_uncertainty_rel = 0;
  // The CPU time the ranks' compute actions took (their threads' own, F B I
  // W R and the optimizer step, every rank of the run together), per step,
  // the warm-up included, and its median and median absolute deviation over
  // the counted steps; empty and 0 where the ranks did not measure it (CUDA,
  // whose kernels run apart from the thread; several intra-op threads per
  // rank). The same work takes the same CPU time on a host that keeps its
  // pace: where it does not, the work itself took longer (a hypervisor that
  // runs other guests on the same physical core without counting it as
  // steal, a sibling hyper-thread, the clock), which no /proc/stat counter
  // shows and no waiting for a core explains.
  std::vector<double> step_compute_cpu_s;
  double compute_cpu_median_s = 0, compute_cpu_mad_s = 0;
  nlohmann::json to_json() const;
};

// Per host from the ranks' readings (`samples[r]`: rank r's steps + 1
// readings; `hosts[r]`: its host), with the run's step times. Ranks without
// readings (cpus = 0) leave their host out. Throws pipetwin::Error naming a
// rank whose readings do not cover the steps.
// `compute_cpu_s[r]`: rank r's compute actions' CPU time per step (empty:
// not measured; every rank must have measured it for the run's figure).
RunNoise measure_noise(const std::vector<std::vector<HostSample>>& samples, const std::vector<std::string>& hosts,
                       const std::vector<double>& step_times_s,
                       const std::vector<std::vector<double>>& compute_cpu_s = {});

}  // namespace pipetwin::exec
