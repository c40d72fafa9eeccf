// fit_sharing(): how the ranks of a shared host share its cores, from the
// replayed step times and bubbles of the runs (golden-section searches).
#include "calibration/fit_parts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "calibration/least_squares.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

namespace fitting {

double golden_min(const std::function<double(double)>& f, double lo, double hi, double tolerance) {
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = lo, b = hi, c = b - g * (b - a), d = a + g * (b - a);
  double fc = f(c), fd = f(d);
  while (b - a > tolerance) {
    if (fc <= fd) {
      b = d, d = c, fd = fc;
      c = b - g * (b - a), fc = f(c);
    } else {
      a = c, c = d, fc = fd;
      d = a + g * (b - a), fd = f(d);
    }
  }
  // The ends too: the optimum may be the boundary (no sharing to fit).
  const double mid = (a + b) / 2, fm = f(mid), flo = f(lo), fhi = f(hi);
  if (fhi <= fm && fhi <= flo) return hi;
  if (flo <= fm) return lo;
  return mid;
}

double scan_min(const std::function<double(double)>& f, double lo, double hi, double tolerance, int points) {
  points = std::max(points, 2);
  const double step = (hi - lo) / (points - 1);
  double best_x = lo, best = f(lo);
  for (int i = 1; i < points; ++i) {
    const double x = i + 1 == points ? hi : lo + i * step, v = f(x);
    if (v < best) best = v, best_x = x;
  }
  const double x = golden_min(f, std::max(lo, best_x - step), std::min(hi, best_x + step), tolerance);
  return f(x) < best ? x : best_x;
}

}  // namespace fitting

namespace {

// The replays of `set` on `hw` against their measurements: Huber at 5% on
// the step's relative error plus the bubble's error.
double replay_loss(const std::vector<const TraceRun*>& set, const pm::Hardware& hw, const Replay& replay) {
  double sum = 0;
  for (const auto* run : set) {
    const ps::Timeline predicted = replay(*run, hw);
    const double step = predicted.makespan();
    sum += huber_loss(step / run->step_time_s - 1) + huber_loss(predicted.bubble_fraction() - run->bubble);
  }
  return sum;
}

// effective_cores from the runs of several ranks within the cores.
void fit_effective_cores(const std::vector<const TraceRun*>& within, FitResult& fit, const Replay& replay) {
  pm::Topology& t = fit.hardware.topology;
  const auto loss = [&] { return replay_loss(within, fit.hardware, replay); };
  const double cores = t.host_cores;
  const double c = fitting::golden_min(
      [&](double x) {
        t.effective_cores = x;
        return loss();
      },
      1.0, cores, 1e-3);
  // Kept only where it does better than the plain cores (the runs may never
  // have had ranks computing at once: then nothing tells it).
  t.effective_cores = c;
  const double with = loss();
  t.effective_cores = 0;
  const double without = loss();
  t.effective_cores = c < cores - 2e-3 && with < without * (1 - 1e-6) ? c : 0;
  fit.coefficients.push_back({"host.effective_cores", t.effective_cores > 0 ? t.effective_cores : cores,
                              "fitted on the step times of " + std::to_string(within.size()) +
                                  " run(s) of several ranks within the cores (replayed)"});
}

// From the runs with more ranks than cores: the way of sharing the cores
// (run_to_completion, time_slice_s) and the scale of the transfers' waits for
// a core. `host_slice` is the slice the runs' host recorded for its
// scheduler (0: none recorded).
void fit_core_sharing(const std::vector<const TraceRun*>& beyond, double host_slice, FitResult& fit,
                      const Replay& replay) {
  pm::Topology& t = fit.hardware.topology;
  const auto loss = [&] { return replay_loss(beyond, fit.hardware, replay); };
  // The transfers' waits for a core: their measured means (fit()) set their
  // shape, the step times their scale; 1 ms each when none was measured.
  const double send = t.oversubscribed_send_s, recv = t.oversubscribed_recv_s;
  const bool measured = send > 0 || recv > 0;
  const auto set = [&](double x) {
    t.oversubscribed_send_s = measured ? x * send : x * 1e-3;
    t.oversubscribed_recv_s = measured ? x * recv : x * 1e-3;
  };
  // Each way of sharing, with its best scale: the cores shared evenly, or
  // each kept by a rank until it receives a message, or until then or the
  // end of a time slice while others wait (round robin), the slice the
  // host's scheduler uses where the runs recorded it, else one of 16 ms
  // down to 1 ms; the best of them. The slice is the scheduler's own where
  // it is known rather than fitted: the runs of a calibration hold two or
  // three configurations of more ranks than cores, and the octave they
  // favour moved from one calibration to the next on the same host, where the
  // recorded 1.5 ms predicted the held-out ones better (docs/calibration.md,
  // "The scheduler's own slice").
  // Each way that keeps cores, again with a queue per core (affinity: Linux
  // queues a task on the CPU it last ran on, sim/cores.hpp).
  struct Way {
    bool keep;
    double slice_s, wake_s = 0;
    bool affine = false;
  };
  std::vector<Way> ways =
      host_slice > 0
          ? std::vector<Way>{{false, 0}, {true, 0}, {true, host_slice}, {true, 0, 0.5e-3}, {true, 0, 2e-3},
                             {true, host_slice, 0.5e-3}, {true, host_slice, 2e-3}}
          : std::vector<Way>{{false, 0},          {true, 0},           {true, 16e-3},       {true, 8e-3},
                             {true, 4e-3},        {true, 2e-3},        {true, 1e-3},        {true, 0, 0.5e-3},
                             {true, 0, 2e-3},     {true, 16e-3, 0.5e-3}, {true, 4e-3, 0.5e-3}, {true, 16e-3, 2e-3},
                             {true, 4e-3, 2e-3}};
  for (std::size_t i = 0, n = ways.size(); i < n; ++i) {
    if (ways[i].keep) ways.push_back({true, ways[i].slice_s, ways[i].wake_s, true});
  }
  double best = 0, best_loss = 0;
  Way best_way = ways[0];
  for (const Way& way : ways) {
    t.run_to_completion = way.keep;
    t.time_slice_s = way.slice_s;
    t.wake_preempt_s = way.wake_s;
    t.core_affinity = way.affine;
    const double s = fitting::scan_min(
        [&](double x) {
          set(x);
          return loss();
        },
        0.0, 3.0, 1e-3, 13);
    set(s);
    const double l = loss();
    if (&way == &ways[0] || l < best_loss) best = s, best_loss = l, best_way = way;
  }
  t.run_to_completion = best_way.keep;
  t.time_slice_s = best_way.slice_s;
  t.wake_preempt_s = best_way.wake_s;
  t.core_affinity = best_way.affine;
  set(best);
  fit.coefficients.push_back({"oversubscribed.run_to_completion", best_way.keep ? 1.0 : 0.0,
                              "fitted on the steps and bubbles of " + std::to_string(beyond.size()) +
                                  " run(s) with more ranks than cores (replayed): 1 a rank keeps a core until it receives a "
                                  "message (or its time slice ends), 0 shares it"});
  char host_ms[32] = {};
  std::snprintf(host_ms, sizeof(host_ms), "%.3g ms", host_slice * 1e3);
  fit.coefficients.push_back(
      {"oversubscribed.time_slice_s", best_way.slice_s,
       host_slice > 0 ? "none or the " + std::string(host_ms) + " the runs' host recorded for its scheduler, the better on the same (0: none)"
                      : "the best of none, 16, 8, 4, 2 and 1 ms on the same (0: none; the runs recorded no scheduler slice)"});
  fit.coefficients.push_back(
      {"oversubscribed.wake_preempt_s", best_way.wake_s,
       host_slice > 0 ? "the best of none, 0.5 and 2 ms on the same, with no time slice or the host's (0: none)"
                      : "the best of none, 0.5 and 2 ms on the same, with no time slice or one of 16 or 4 ms (0: none)"});
  fit.coefficients.push_back({"oversubscribed.core_affinity", best_way.affine ? 1.0 : 0.0,
                              "each of those ways with a queue per core, or one for all, the better on the same (1: per core)"});
  fit.coefficients.push_back({"oversubscribed.scale", best, "of the transfers' waits for a core, fitted on the same"});
}

}  // namespace

void fit_sharing(const std::vector<TraceRun>& runs, FitResult& fit, const Replay& replay) {
  const pm::Topology& t = fit.hardware.topology;
  if (t.kind != pm::TopologyKind::SharedHost) return;
  std::vector<const TraceRun*> within, beyond;
  for (const auto& run : runs) {
    const int demand = run.ranks() * fitting::threads_of(run);
    if (demand > t.host_cores) beyond.push_back(&run);
    else if (run.ranks() > 1) within.push_back(&run);
  }
  if (!within.empty() && t.host_cores > 1) fit_effective_cores(within, fit, replay);
  if (!beyond.empty()) fit_core_sharing(beyond, recorded_sched_slice_s(runs), fit, replay);
}

}  // namespace pipetwin::calibration
