// fit_sharing(): how the ranks of a shared host share its cores, from the
// replayed step times and bubbles of the runs (golden-section searches).
#include "calibration/fit_parts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "calibration/least_squares.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

namespace fitting {

namespace {
// f, each value computed once (a replay of every run: the searches below
// come back to their ends and to the best point).
class Memo {
 public:
  explicit Memo(const std::function<double(double)>& f) : f_(f) {}
  double operator()(double x) {
    const auto [at, fresh] = seen_.try_emplace(x, 0.0);
    if (fresh) at->second = f_(x);
    return at->second;
  }

 private:
  const std::function<double(double)>& f_;
  std::map<double, double> seen_;
};

double golden(Memo& f, double lo, double hi, double tolerance) {
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
}  // namespace

double golden_min(const std::function<double(double)>& f, double lo, double hi, double tolerance) {
  Memo memo(f);
  return golden(memo, lo, hi, tolerance);
}

double scan_min(const std::function<double(double)>& f, double lo, double hi, double tolerance, int points, double* least) {
  Memo memo(f);
  points = std::max(points, 2);
  const double step = (hi - lo) / (points - 1);
  double best_x = lo, best = memo(lo);
  for (int i = 1; i < points; ++i) {
    const double x = i + 1 == points ? hi : lo + i * step, v = memo(x);
    if (v < best) best = v, best_x = x;
  }
  const double x = golden(memo, std::max(lo, best_x - step), std::min(hi, best_x + step), tolerance), v = memo(x);
  if (v < best) best = v, best_x = x;
  if (least) *least = best;
  return best_x;
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

// effective_cores from the runs of several ranks within the cores, with the
// scale of their transfers' waits for a core (full_host_*: their measured
// means set their shape). Both lengthen the step; only the cores' worth
// stretches the actions, the waits lengthen the idle between them, and the
// bubbles tell the two apart: on a host whose two ranks on two cores
// computed about 15% slower than alone, the cores alone (1.69) put every
// two-rank bubble of the demo 1.4 to 3.1 points low with the step right
// (docs/calibration.md, "Where two and four ranks lose their time").
void fit_effective_cores(const std::vector<const TraceRun*>& within, FitResult& fit, const Replay& replay) {
  pm::Topology& t = fit.hardware.topology;
  const auto loss = [&] { return replay_loss(within, fit.hardware, replay); };
  const double cores = t.host_cores;
  const auto best_cores = [&] {
    return fitting::golden_min(
        [&](double x) {
          t.effective_cores = x;
          return loss();
        },
        1.0, cores, 1e-3);
  };
  double c = best_cores(), scale = 1;
  const double send = t.full_host_send_s, recv = t.full_host_recv_s;
  if (send + recv > 0) {
    t.effective_cores = c;
    double least = loss();
    for (const double s : {0.0, 0.5, 1.5, 2.0, 3.0}) {
      t.full_host_send_s = s * send, t.full_host_recv_s = s * recv;
      const double x = best_cores();
      t.effective_cores = x;
      if (const double l = loss(); l < least * (1 - 1e-6)) least = l, scale = s, c = x;
    }
    t.full_host_send_s = scale * send, t.full_host_recv_s = scale * recv;
  }
  // Kept only where it does better than the plain cores (the runs may never
  // have had ranks computing at once: then nothing tells it).
  t.effective_cores = c;
  const double with = loss();
  t.effective_cores = 0;
  const double without = loss();
  t.effective_cores = c < cores - 2e-3 && with < without * (1 - 1e-6) ? c : 0;
  fit.coefficients.push_back({"host.effective_cores", t.effective_cores > 0 ? t.effective_cores : cores,
                              "fitted on the step times and bubbles of " + std::to_string(within.size()) +
                                  " run(s) of several ranks within the cores (replayed)"});
  if (send + recv > 0) {
    fit.coefficients.push_back({"full_host.scale", scale,
                                "of the transfers' waits for a core with as many ranks as cores (their measured means), "
                                "the best of 0, 0.5, 1, 1.5, 2 and 3 with the cores' worth, on the same"});
  }
}

// A way of sharing the cores with more ranks than cores (sim/simulator.cpp):
// keep (run_to_completion), its time slice, its wake preemption, a queue per core.
struct Way {
  bool keep;
  double slice_s, wake_s = 0;
  bool affine = false;
  friend bool operator==(const Way&, const Way&) = default;
};

// Each way of sharing: the cores shared evenly, or each kept by a rank until
// it receives a message, or until then or the end of a time slice while
// others wait (round robin), the slice the host's scheduler uses where the
// runs recorded it (`host_slice`, 0: none recorded), else one of 16 ms down
// to 1 ms. The slice is the scheduler's own where it is known rather than
// fitted: the runs of a calibration hold two or three configurations of more
// ranks than cores, and the octave they favour moved from one calibration to
// the next on the same host, where the recorded 1.5 ms predicted the
// held-out ones better (docs/calibration.md, "The scheduler's own slice").
// Each way that keeps cores, again with a queue per core (affinity: Linux
// queues a task on the CPU it last ran on, sim/cores.hpp).
std::vector<Way> sharing_ways(double host_slice) {
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
  return ways;
}

// The fit of the runs with more ranks than cores, on the topology it sets.
class CoreSharing {
 public:
  CoreSharing(const std::vector<const TraceRun*>& beyond, double host_slice, FitResult& fit, const Replay& replay)
      : beyond_(beyond), fit_(fit), replay_(replay), t_(fit.hardware.topology), ways_(sharing_ways(host_slice)),
        send_(t_.oversubscribed_send_s), recv_(t_.oversubscribed_recv_s) {}

  double loss() const { return replay_loss(beyond_, fit_.hardware, replay_); }

  // The transfers' waits for a core: their measured means (fit()) set their
  // shape, the step times their scale; 1 ms each when none was measured.
  bool measured() const { return send_ > 0 || recv_ > 0; }
  void set(double x) {
    t_.oversubscribed_send_s = measured() ? x * send_ : x * 1e-3;
    t_.oversubscribed_recv_s = measured() ? x * recv_ : x * 1e-3;
  }

  void use(const Way& way) {
    t_.run_to_completion = way.keep;
    t_.time_slice_s = way.slice_s;
    t_.wake_preempt_s = way.wake_s;
    t_.core_affinity = way.affine;
  }

  // The waits' best scale with everything else as it is (set to it), and
  // the loss there.
  std::pair<double, double> best_scale() {
    double least = 0;
    const double x = fitting::scan_min(
        [&](double x) {
          set(x);
          return loss();
        },
        0.0, 3.0, 1e-3, 13, &least);
    set(x);
    return {x, least};
  }

  // The best way at the capacity as it is, each with its best scale (set to them).
  void choose_way() {
    for (const Way& way : ways_) {
      use(way);
      const auto [s, l] = best_scale();
      if (&way == &ways_[0] || l < loss_) scale_ = s, loss_ = l, way_ = way;
    }
    use(way_);
    set(scale_);
  }

  // The compute's slowdown with more ranks than cores (oversubscribed_compute),
  // measured on the actions that ran alone (fit_compute.cpp), put to the
  // replays' steps and bubbles: it, 3/4, 1/2, 1/4 of it or none, the waits'
  // best scale at each, the best kept. It stretches every action of such a
  // run; where what the ranks lose is partly between the actions (wake-ups,
  // the transport's threads), all of it made the four-rank steps right and
  // their bubbles 4 to 5 points low (docs/calibration.md, "Where two and
  // four ranks lose their time").
  // Its time per action (oversubscribed_action_s) is kept in the same share.
  double fit_slower() {
    const double lone = t_.oversubscribed_compute, lone_action = t_.oversubscribed_action_s;
    if (!(lone > 0) && !(lone_action > 0)) return 1;
    double best = 1, scale = scale_, least = loss_;
    for (const double f : {0.0, 0.25, 0.5, 0.75}) {
      t_.oversubscribed_compute = f * lone;
      t_.oversubscribed_action_s = f * lone_action;
      const auto [x, l] = best_scale();
      if (l < least * (1 - 1e-6)) least = l, best = f, scale = x;
    }
    t_.oversubscribed_compute = best * lone;
    t_.oversubscribed_action_s = best * lone_action;
    share_ = best;
    scale_ = scale, loss_ = least;
    set(scale_);
    return share_;
  }

  // The way as the topology holds it, with the waits at their measured means.
  void keep_way() {
    way_ = {t_.run_to_completion, t_.time_slice_s, t_.wake_preempt_s, t_.core_affinity};
    scale_ = measured() ? 1 : 0, loss_ = loss();
  }

  // The cores' worth of compute with more ranks than cores: the ranks
  // computing at once there may slow each other more than within the cores
  // (each resumes on a core another rank has just left, its cache cold).
  // Kept only where it does better than the capacity within the cores (runs
  // of one rank at a time, M = 1, never tell it). Without it the waits alone
  // take what the compute loses, and their count grows with M: the fit
  // traded a fast M = 4 against a slow M = 16 and predicted the M between
  // them fast (docs/calibration.md, "Four ranks computing at once").
  // A grid of capacities (capacity_grid), then, with `rechoose`, the way
  // again at the capacity found, and the grid again if it changed. Nothing
  // to do where the replays already match. Returns whether it was kept.
  bool fit_capacity(bool rechoose) {
    const double without = loss_, plain_scale = scale_;
    const Way plain_way = way_;
    if (without <= 1e-8 * static_cast<double>(beyond_.size())) return false;  // within ~0.01% each
    capacity_grid();
    if (rechoose && t_.oversubscribed_cores > 0) {
      const Way before = way_;
      choose_way();
      if (before != way_) capacity_grid();
    }
    if (t_.oversubscribed_cores > 0 && loss_ < without * (1 - 1e-6)) return true;
    t_.oversubscribed_cores = 0;
    way_ = plain_way, scale_ = plain_scale;
    use(way_);
    set(scale_);
    return false;
  }

  void record(double host_slice) const;

 private:
  // From the capacity within the cores down to three quarters of it in
  // steps of 2.5%, the waits' best scale at each (the two trade against each
  // other: turns between them from the capacity within the cores stopped at
  // their first dip; on bench_fidelity.sh's runs of 2026-11-29 at 1.89
  // cores, where the grid finds 1.85 at a loss 6% lower, with the way first chosen).
  void capacity_grid() {
    const double within = t_.compute_capacity();
    double cores = t_.oversubscribed_cores > 0 ? t_.oversubscribed_cores : within, scale = scale_, least = loss_;
    for (int i = 1; i <= 10; ++i) {
      t_.oversubscribed_cores = std::max(1.0, within * (1 - 0.025 * i));
      const auto [x, l] = best_scale();
      if (l < least) least = l, cores = t_.oversubscribed_cores, scale = x;
    }
    t_.oversubscribed_cores = cores < within - 2e-3 ? cores : 0;
    scale_ = scale, loss_ = least;
    set(scale_);
  }

  const std::vector<const TraceRun*>& beyond_;
  FitResult& fit_;
  const Replay& replay_;
  pm::Topology& t_;
  const std::vector<Way> ways_;
  const double send_, recv_;
  double scale_ = 0, loss_ = 0, share_ = 1;
  Way way_{false, 0};
};

void CoreSharing::record(double host_slice) const {
  const auto add = [&](std::string name, double value, std::string how) {
    fit_.coefficients.push_back({std::move(name), value, std::move(how)});
  };
  add("oversubscribed.run_to_completion", way_.keep ? 1.0 : 0.0,
      "fitted on the steps and bubbles of " + std::to_string(beyond_.size()) +
          " run(s) with more ranks than cores (replayed): 1 a rank keeps a core until it receives a "
          "message (or its time slice ends), 0 shares it");
  char host_ms[32] = {};
  std::snprintf(host_ms, sizeof(host_ms), "%.3g ms", host_slice * 1e3);
  add("oversubscribed.time_slice_s", way_.slice_s,
      host_slice > 0 ? "none or the " + std::string(host_ms) + " the runs' host recorded for its scheduler, the better on the same (0: none)"
                     : "the best of none, 16, 8, 4, 2 and 1 ms on the same (0: none; the runs recorded no scheduler slice)");
  add("oversubscribed.wake_preempt_s", way_.wake_s,
      host_slice > 0 ? "the best of none, 0.5 and 2 ms on the same, with no time slice or the host's (0: none)"
                     : "the best of none, 0.5 and 2 ms on the same, with no time slice or one of 16 or 4 ms (0: none)");
  add("oversubscribed.core_affinity", way_.affine ? 1.0 : 0.0,
      "each of those ways with a queue per core, or one for all, the better on the same (1: per core)");
  add("oversubscribed.scale", scale_, "of the transfers' waits for a core, fitted on the same");
  add("oversubscribed.compute_share", share_,
      "of oversubscribed.compute and action_s (the lone actions'), the best of 0, 1/4, 1/2, 3/4 and 1 on the same, with the way");
  add("oversubscribed.cores", t_.compute_capacity(t_.host_cores + 1),
      "the cores' worth of compute the ranks computing at once get, fitted on the same with the way and the scale "
      "(kept where it beats the capacity within the cores)");
}

// From the runs with more ranks than cores: the way of sharing the cores,
// the scale of the transfers' waits for a core, the capacity of the ranks
// computing at once. `host_slice` is the slice the runs' host recorded for
// its scheduler (0: none recorded).
void fit_core_sharing(const std::vector<const TraceRun*>& beyond, double host_slice, FitResult& fit,
                      const Replay& replay) {
  CoreSharing sharing(beyond, host_slice, fit, replay);
  sharing.choose_way();
  sharing.fit_slower();
  sharing.fit_capacity(/*rechoose=*/true);
  sharing.record(host_slice);
}

}  // namespace

namespace fitting {

bool fit_oversubscribed_cores(const std::vector<const TraceRun*>& beyond, FitResult& fit, const Replay& replay) {
  CoreSharing sharing(beyond, 0, fit, replay);
  sharing.keep_way();
  return sharing.fit_capacity(/*rechoose=*/false);
}

double fit_compute_share(const std::vector<const TraceRun*>& beyond, FitResult& fit, const Replay& replay) {
  CoreSharing sharing(beyond, 0, fit, replay);
  sharing.keep_way();
  return sharing.fit_slower();
}

}  // namespace fitting

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
