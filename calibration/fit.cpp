// fit(): observations from the traces, small constrained least-squares
// problems (calibration/least_squares.hpp: one per pass, one for the step,
// one for the link), and the calibrated hardware built from their solutions.
#include "calibration/fit.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "calibration/fit_parts.hpp"
#include "calibration/least_squares.hpp"
#include "models/stage_costs.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/interpreter.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;
using namespace fitting;

namespace fitting {

bool Inputs::transfers_from(const TraceRun& run) const {
  return all_shared || std::find(unshared.begin(), unshared.end(), &run) != unshared.end();
}

void record(std::vector<Coefficient>& into, const Problem& prob, const Solution& sol) {
  for (std::size_t j = 0; j < prob.params.size(); ++j) into.push_back({prob.params[j].name, sol.value[j], sol.how[j]});
}

}  // namespace fitting

namespace {

// What the parts read: `given` with the cores the traces recorded where it
// is a shared host, and the runs whose transfers are fitted; notes on both.
Inputs inputs_of(const std::vector<TraceRun>& runs, const pm::Hardware& given, std::vector<std::string>& notes) {
  Inputs in{runs, given, {}, false};
  pm::Hardware& base = in.base;
  // A shared host has the cores the traces were measured with, not the base's.
  if (const int cores = base.topology.kind == pm::TopologyKind::SharedHost ? recorded_host_cores(runs) : 0;
      cores > 0 && cores != base.topology.host_cores) {
    notes.push_back("host_cores " + std::to_string(cores) + ", as the traces' ranks recorded (the base hardware '" +
                    given.name + "' has " + std::to_string(given.topology.host_cores) + ")");
    base.topology.host_cores = cores;
  }
  if (base.topology.kind == pm::TopologyKind::SharedHost) {
    for (const auto& run : runs) {
      std::set<std::string> hosts(run.hosts.begin(), run.hosts.end());
      hosts.erase("");
      if (hosts.size() < 2) continue;
      notes.push_back(run.path + ": its ranks ran on " + std::to_string(hosts.size()) + " hosts (" + *hosts.begin() + ", " +
                      *std::next(hosts.begin()) + (hosts.size() > 2 ? ", ..." : "") +
                      "), but the base hardware is one shared host: the fit and its replays take every rank "
                      "as a process of that host; start from a hardware file of several hosts instead");
      break;
    }
  }
  for (const auto& run : runs) {
    if (!oversubscribed(run, base)) in.unshared.push_back(&run);
  }
  in.all_shared = in.unshared.empty();
  return in;
}

// `base` with the fitted device (every rank's) and topology.
pm::Hardware calibrated(const pm::Hardware& base, const pm::Device& device, const pm::Topology& topology, std::size_t runs,
                        const std::string& model) {
  pm::Hardware hw = base;
  hw.devices.clear();
  hw.device = device;
  hw.topology = topology;
  hw.name = base.name + "-calibrated";
  hw.source = "pipetwin calibrate: fitted on " + std::to_string(runs) + " trace(s) of " + model + ", starting from " + base.name;
  return hw;
}

}  // namespace

FitResult fit(const std::vector<TraceRun>& runs, const pm::Hardware& given) {
  check_together(runs);
  FitResult result;
  const Inputs in = inputs_of(runs, given, result.notes);
  const pm::Hardware& base = in.base;
  const pm::Model& model = runs.front().model;
  const pm::Precision precision = model.precision;
  pm::Device device = base.device;
  const double base_peak = device.peak_flops(precision);
  if (!(base_peak > 0)) throw Error("calibrate: the base hardware's device has no peak FLOP/s for " + std::string(pm::precision_name(precision)));

  // 1. Compute: the cold weights, the curves, compute with more ranks than cores.
  Curves curves = fit_curves(in, base_peak, device, result);
  note_unfitted_transfers(in, result.notes);
  // 2. The transfers' observations: per (sender stage, direction).
  std::vector<LinkGroup> links = link_groups(runs, base);
  // 3. The device: peak raised to the fastest kind, curves as efficiencies.
  set_device_curves(curves, base_peak, precision, device, result.notes);
  // 4. Optimizer step: overhead + traffic / memory bandwidth.
  fit_step(curves.observed.steps, base, device, result);
  // 5. Transfers: the sender's overhead, the link's latency and bandwidth, the receiver's cost.
  const pm::Topology topology = fit_transfers(in, links, curves.slower, device, result);
  // 6. The calibrated hardware, and every group against its StageCostModel.
  result.hardware = calibrated(base, device, topology, runs.size(), model.name);
  add_residuals(in, curves.as_measured, links, curves.cold_s_per_byte, result);
  note_not_fitted(result);
  return result;
}

namespace {

// Golden-section search of the minimum of f on [lo, hi] to `tolerance`.
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

}  // namespace

void fit_sharing(const std::vector<TraceRun>& runs, FitResult& fit, const Replay& replay) {
  pm::Topology& t = fit.hardware.topology;
  if (t.kind != pm::TopologyKind::SharedHost) return;
  std::vector<const TraceRun*> within, beyond;
  for (const auto& run : runs) {
    const int demand = run.ranks() * threads_of(run);
    if (demand > t.host_cores) beyond.push_back(&run);
    else if (run.ranks() > 1) within.push_back(&run);
  }
  const auto huber = [](double r) {
    r = std::abs(r);
    return r <= 0.05 ? 0.5 * r * r : 0.05 * (r - 0.025);
  };
  const auto loss = [&](const std::vector<const TraceRun*>& set) {
    double sum = 0;
    for (const auto* run : set) {
      const ps::Timeline predicted = replay(*run, fit.hardware);
      const double step = predicted.makespan();
      sum += huber(step / run->step_time_s - 1) + huber(predicted.bubble_fraction() - run->bubble);
    }
    return sum;
  };
  const double cores = t.host_cores;
  if (!within.empty() && cores > 1) {
    const double c = golden_min(
        [&](double x) {
          t.effective_cores = x;
          return loss(within);
        },
        1.0, cores, 1e-3);
    // Kept only where it does better than the plain cores (the runs may never
    // have had ranks computing at once: then nothing tells it).
    t.effective_cores = c;
    const double with = loss(within);
    t.effective_cores = 0;
    const double without = loss(within);
    t.effective_cores = c < cores - 2e-3 && with < without * (1 - 1e-6) ? c : 0;
    fit.coefficients.push_back({"host.effective_cores", t.effective_cores > 0 ? t.effective_cores : cores,
                                "fitted on the step times of " + std::to_string(within.size()) +
                                    " run(s) of several ranks within the cores (replayed)"});
  }
  if (!beyond.empty()) {
    // The transfers' waits for a core: their measured means (fit()) set their
    // shape, the step times their scale; 1 ms each when none was measured.
    const double send = t.oversubscribed_send_s, recv = t.oversubscribed_recv_s;
    const bool measured = send > 0 || recv > 0;
    const auto set = [&](double x) {
      t.oversubscribed_send_s = measured ? x * send : x * 1e-3;
      t.oversubscribed_recv_s = measured ? x * recv : x * 1e-3;
    };
    // Each way of sharing, with its best scale: the cores shared evenly, or
    // each kept by a rank until it waits for a message, or until then or the
    // end of a time slice while others wait (round robin) of 16 ms down to
    // 1 ms; the best of them.
    struct Way {
      bool keep;
      double slice_s;
    };
    const Way ways[] = {{false, 0}, {true, 0}, {true, 16e-3}, {true, 8e-3}, {true, 4e-3}, {true, 2e-3}, {true, 1e-3}};
    double best = 0, best_loss = 0;
    Way best_way = ways[0];
    for (const Way& way : ways) {
      t.run_to_completion = way.keep;
      t.time_slice_s = way.slice_s;
      const double s = golden_min(
          [&](double x) {
            set(x);
            return loss(beyond);
          },
          0.0, 3.0, 1e-3);
      set(s);
      const double l = loss(beyond);
      if (&way == &ways[0] || l < best_loss) best = s, best_loss = l, best_way = way;
    }
    t.run_to_completion = best_way.keep;
    t.time_slice_s = best_way.slice_s;
    set(best);
    fit.coefficients.push_back({"oversubscribed.run_to_completion", best_way.keep ? 1.0 : 0.0,
                                "fitted on the steps and bubbles of " + std::to_string(beyond.size()) +
                                    " run(s) with more ranks than cores (replayed): 1 a rank keeps a core until it waits for a "
                                    "message (or its time slice ends), 0 shares it"});
    fit.coefficients.push_back({"oversubscribed.time_slice_s", best_way.slice_s,
                                "the best of none, 16, 8, 4, 2 and 1 ms on the same (0: none)"});
    fit.coefficients.push_back({"oversubscribed.scale", best,
                                "of the transfers' waits for a core, fitted on the same"});
  }
}

}  // namespace pipetwin::calibration
