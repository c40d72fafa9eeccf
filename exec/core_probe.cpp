// The host's cores, probed: one thread alone, then every thread at once.
#include "exec/core_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <latch>
#include <thread>

#include <pthread.h>
#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "exec/host_load.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::exec {
namespace {

using Clock = std::chrono::steady_clock;
using schedule::median;

// A small single-precision matrix product, its three operands in a core's
// own caches (3 x 96 x 96 floats, 108 KiB): compute-bound, as the ranks'
// layers are, and with nothing shared between threads.
class Kernel {
 public:
  Kernel() : a_(kN * kN), b_(kN * kN), c_(kN * kN) {
    for (int i = 0; i < kN * kN; ++i) {
      a_[i] = static_cast<float>((i * 7) % 13) / 13.0f;
      b_[i] = static_cast<float>((i * 5) % 11) / 11.0f;
    }
  }

  // Iterations per second over `seconds`.
  double pace(double seconds) {
    const auto start = Clock::now();
    const auto until = start + std::chrono::duration<double>(seconds);
    long n = 0;
    auto now = start;
    do {
      product();
      ++n;
      now = Clock::now();
    } while (now < until);
    sink_ = sink_ + c_[static_cast<std::size_t>(n % (kN * kN))];
    return static_cast<double>(n) / std::chrono::duration<double>(now - start).count();
  }

 private:
  static constexpr int kN = 96;
  void product() {
    std::fill(c_.begin(), c_.end(), 0.0f);
    for (int i = 0; i < kN; ++i) {
      for (int k = 0; k < kN; ++k) {
        const float x = a_[i * kN + k];
        for (int j = 0; j < kN; ++j) c_[i * kN + j] += x * b_[k * kN + j];
      }
    }
  }
  std::vector<float> a_, b_, c_;
  volatile float sink_ = 0;
};

// Not counted: a thread's first moments on its CPU (a move there, the
// clock's ramp).
double settle(double seconds) { return std::min(0.01, seconds / 10); }

// Thread t on CPU t (of the host's `cpus`), where the host lets it; else
// wherever the kernel puts it.
void pin(int t, int cpus) {
  if (cpus < 1) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(t % cpus, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// Every thread's pace at once (they start together), and /proc/stat's
// shares over that phase.
void together(std::vector<Kernel>& kernels, double seconds, int cpus, ProbeRound& round) {
  const int n = static_cast<int>(kernels.size());
  round.together_per_s.assign(n, 0);
  std::latch ready(n + 1);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      pin(t, cpus);
      kernels[t].pace(settle(seconds));
      ready.arrive_and_wait();
      round.together_per_s[t] = kernels[t].pace(seconds);
    });
  }
  const HostSample before = sample_host(false);
  ready.arrive_and_wait();
  for (auto& th : threads) th.join();
  const HostSample after = sample_host(false);
  if (before.cpus > 0 && after.cpus == before.cpus) {
    const HostWindow w = HostWindow::between(before, after);
    round.steal_share = std::max(0.0, w.steal());
    round.other_share = w.other();
  }
}

double fixed(double v, int digits) {
  const double p = std::pow(10.0, digits);
  return std::round(v * p) / p;
}

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b, c);
  return buf;
}

}  // namespace

double ProbeRound::cores_delivered() const {
  double cores = 0;
  for (std::size_t t = 0; t < together_per_s.size() && t < alone_per_s.size(); ++t) {
    const double reference = std::max(alone_per_s[t], together_per_s[t]);
    if (reference > 0) cores += together_per_s[t] / reference;
  }
  return cores;
}

bool ProbeRound::alone_disturbed() const {
  for (std::size_t t = 0; t < together_per_s.size() && t < alone_per_s.size(); ++t) {
    if (alone_per_s[t] < CoreProbe::kShort * together_per_s[t]) return true;
  }
  return false;
}

namespace {

// The median over the rounds of what `of` reads of each; 0 without rounds.
template <typename Of>
double median_over(const std::vector<ProbeRound>& rounds, Of of) {
  std::vector<double> v;
  for (const auto& r : rounds) v.push_back(of(r));
  return v.empty() ? 0 : median(v);
}

}  // namespace

double CoreProbe::median_delivered() const {
  return median_over(rounds, [](const ProbeRound& r) { return r.cores_delivered(); });
}

double CoreProbe::least_delivered() const {
  double least = rounds.empty() ? 0 : rounds.front().cores_delivered();
  for (const auto& r : rounds) least = std::min(least, r.cores_delivered());
  return least;
}

int CoreProbe::short_rounds(double fraction) const {
  return static_cast<int>(std::count_if(rounds.begin(), rounds.end(),
                                        [&](const ProbeRound& r) { return r.cores_delivered() < fraction * threads; }));
}

int CoreProbe::disturbed_rounds() const {
  return static_cast<int>(std::count_if(rounds.begin(), rounds.end(), [](const ProbeRound& r) { return r.alone_disturbed(); }));
}

double CoreProbe::alone_median() const {
  std::vector<double> a;
  for (const auto& r : rounds) a.insert(a.end(), r.alone_per_s.begin(), r.alone_per_s.end());
  return a.empty() ? 0 : median(a);
}

double CoreProbe::alone_spread() const {
  double lo = 0, hi = 0;
  for (const auto& r : rounds) {
    for (const double a : r.alone_per_s) {
      lo = lo == 0 ? a : std::min(lo, a);
      hi = std::max(hi, a);
    }
  }
  return lo > 0 ? hi / lo : 0;
}

int CoreProbe::slow_alone(double fraction) const {
  const double m = alone_median();
  int n = 0;
  for (const auto& r : rounds) n += static_cast<int>(std::count_if(r.alone_per_s.begin(), r.alone_per_s.end(), [&](double a) { return a < fraction * m; }));
  return n;
}

double CoreProbe::steal_share() const {
  return median_over(rounds, [](const ProbeRound& r) { return r.steal_share; });
}

double CoreProbe::other_share() const {
  return median_over(rounds, [](const ProbeRound& r) { return r.other_share; });
}

nlohmann::json CoreProbe::to_json() const {
  nlohmann::json rs = nlohmann::json::array();
  for (const auto& r : rounds) {
    rs.push_back({{"alone_per_s", r.alone_per_s},
                  {"together_per_s", r.together_per_s},
                  {"cores_delivered", r.cores_delivered()},
                  {"alone_disturbed", r.alone_disturbed()},
                  {"steal_share", r.steal_share},
                  {"other_share", r.other_share}});
  }
  return {{"producer", "pipetwin probe"},
          {"threads", threads},
          {"cpus", cpus},
          {"seconds", seconds},
          {"short_fraction", kShort},
          {"alone_median_per_s", fixed(alone_median(), 1)},
          {"alone_spread", fixed(alone_spread(), 3)},
          {"slow_alone", slow_alone()},
          {"alone_measurements", static_cast<int>(rounds.size()) * threads},
          {"cores_delivered_median", fixed(median_delivered(), 3)},
          {"cores_delivered_least", fixed(least_delivered(), 3)},
          {"short_rounds", short_rounds()},
          {"disturbed_rounds", disturbed_rounds()},
          {"steal_share", steal_share()},
          {"other_share", other_share()},
          {"rounds", rs}};
}

std::string CoreProbe::summary() const {
  const int n = static_cast<int>(rounds.size());
  const int disturbed = disturbed_rounds();
  std::string s = format("alone: a thread's pace on its CPU spread %.2fx (max/min), ", alone_spread()) +
                  std::to_string(slow_alone()) + " of " + std::to_string(n * threads) +
                  format(" under %.0f%% of their median; together: ", 100 * kShort) +
                  format("cores delivered: median %.2f of %.0f", median_delivered(), threads) + "; " +
                  std::to_string(short_rounds()) + " of " + std::to_string(n) + " rounds under " +
                  format("%.2f (%.0f%%), the least %.2f", kShort * threads, 100 * kShort, least_delivered()) +
                  (disturbed > 0
                       ? "; in " + std::to_string(disturbed) + " of " + std::to_string(n) +
                             " a thread ran faster together than alone (its alone phase disturbed: there its pace "
                             "together is the reference)"
                       : std::string()) +
                  format("; /proc/stat meanwhile: steal %.1f%%, other processes %.1f%% of the host's CPU", 100 * steal_share(),
                         100 * other_share());
  return s;
}

CoreProbe probe_cores(int threads, int rounds, double seconds) {
  if (threads < 1) throw Error("probe: --threads must be at least 1, got " + std::to_string(threads));
  if (rounds < 1) throw Error("probe: --rounds must be at least 1, got " + std::to_string(rounds));
  if (!(seconds > 0 && seconds <= 10)) throw Error("probe: --seconds must be in (0, 10], got " + format("%g", seconds));
  CoreProbe p;
  p.threads = threads;
  p.cpus = host_cpus();
  p.seconds = seconds;
  std::vector<Kernel> kernels(static_cast<std::size_t>(threads));
  for (auto& k : kernels) std::thread([&] { k.pace(std::min(seconds, 0.05)); }).join();  // first pages, the clock's ramp
  for (int r = 0; r < rounds; ++r) {
    ProbeRound round;
    // Each thread alone on its CPU, then all of them at once.
    round.alone_per_s.assign(kernels.size(), 0);
    for (std::size_t t = 0; t < kernels.size(); ++t) {
      std::thread([&, t] {
        pin(static_cast<int>(t), p.cpus);
        kernels[t].pace(settle(seconds));
        round.alone_per_s[t] = kernels[t].pace(seconds);
      }).join();
    }
    together(kernels, seconds, p.cpus, round);
    p.rounds.push_back(std::move(round));
  }
  return p;
}

int host_cpus() { return sample_host(false).cpus; }

double scheduler_slice_s(std::string_view kernel_release, int online_cpus, std::string_view base_slice_ns) {
  if (online_cpus < 1) throw Error("scheduler_slice_s: online CPUs must be at least 1, got " + std::to_string(online_cpus));
  // The value the kernel uses, where debugfs shows it (already scaled for the CPUs).
  const std::string ns(base_slice_ns);
  char* end = nullptr;
  const double given = ns.empty() ? 0 : std::strtod(ns.c_str(), &end);
  if (!ns.empty() && end != ns.c_str() && std::isfinite(given) && given > 0) return given * 1e-9;
  // "6.18.44-fc": EEVDF replaced CFS in 6.6.
  int major = 0, minor = 0;
  if (std::sscanf(std::string(kernel_release).c_str(), "%d.%d", &major, &minor) != 2) return 0;
  if (major < 6 || (major == 6 && minor < 6)) return 0;
  // kernel/sched/fair.c: sysctl_sched_base_slice = 0.75 ms, scaled by
  // 1 + ilog2(min(online CPUs, 8)) (SCHED_TUNABLESCALING_LOG, the default).
  const int cpus = std::min(online_cpus, 8);
  int log2 = 0;
  while ((2 << log2) <= cpus) ++log2;
  return 0.75e-3 * (1 + log2);
}

double host_scheduler_slice_s() {
  struct utsname u {};
  if (::uname(&u) != 0) return 0;
  std::string base;
  if (std::FILE* f = std::fopen("/sys/kernel/debug/sched/base_slice_ns", "r")) {
    char line[64] = {};
    if (std::fgets(line, sizeof(line), f) != nullptr) base = line;
    std::fclose(f);
  }
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return scheduler_slice_s(u.release, online > 0 ? static_cast<int>(online) : 1, base);
}

}  // namespace pipetwin::exec
