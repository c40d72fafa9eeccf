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

void ResidualStats::add(double predicted, double measured) {
  const double e = predicted - measured;
  const double rel = measured > 0 ? e / measured : 0;
  ++count;
  sum_sq_ += e * e;
  sum_sq_rel_ += rel * rel;
  max_s = std::max(max_s, std::abs(e));
  max_rel = std::max(max_rel, std::abs(rel));
}

void ResidualStats::finish() {
  rms_s = count > 0 ? std::sqrt(sum_sq_ / count) : 0;
  rms_rel = count > 0 ? std::sqrt(sum_sq_rel_ / count) : 0;
}

namespace {

}  // namespace

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

}  // namespace

FitResult fit(const std::vector<TraceRun>& runs, const pm::Hardware& given) {
  check_together(runs);
  FitResult result;
  const Inputs in = inputs_of(runs, given, result.notes);
  const pm::Hardware& base = in.base;
  const bool all_shared = in.all_shared;
  const auto is_shared = [&](const TraceRun& run) { return in.shared(run); };
  const pm::Model& model = runs.front().model;
  const pm::Precision precision = model.precision;
  pm::Device device = base.device;
  const double base_peak = device.peak_flops(precision);
  if (!(base_peak > 0)) throw Error("calibrate: the base hardware's device has no peak FLOP/s for " + std::string(pm::precision_name(precision)));

  // --- Compute: the cold weights, the curves, compute with more ranks than cores.
  Curves curves = fit_curves(in, base_peak, device, result);
  note_unfitted_transfers(in, result.notes);

  // --- Transfers: per (sender stage, direction), from the paced timelines.
  std::vector<LinkGroup> links = link_groups(runs, base);

  // --- The device: peak raised to the fastest kind, curves as efficiencies.
  set_device_curves(curves, base_peak, precision, device, result.notes);
  const auto& steps = curves.observed.steps;
  const Observations& as_measured = curves.as_measured;
  const double cold_s_per_byte = curves.cold_s_per_byte, slower = curves.slower;

  // --- Optimizer step: overhead + traffic / memory bandwidth.
  fit_step(steps, base, device, result);

  // --- Transfers: the sender's overhead, then the link's latency and bandwidth.
  const pm::Topology topology = fit_transfers(in, links, slower, device, result);

  pm::Hardware& hw = result.hardware;
  hw = base;
  hw.devices.clear();
  hw.device = device;
  hw.topology = topology;
  hw.name = base.name + "-calibrated";
  hw.source = "pipetwin calibrate: fitted on " + std::to_string(runs.size()) + " trace(s) of " + model.name +
              ", starting from " + base.name;

  // --- Residuals: every group against the calibrated StageCostModel.
  for (const auto& run : runs) {
    const bool apart = is_shared(run) && !all_shared;
    const pm::StageCostModel costs(run.model, hw, request_of(run));
    const auto add = [&](const std::string& op, double predicted, double measured) {
      if (apart) {
        if (op != "send" && op != "transfer" && op != "receive") {
          result.shared_core_residuals[op].add(predicted * (1 + hw.topology.oversubscribed_compute), measured);
        }
        return;
      }
      result.residuals[op].add(predicted, measured);
      result.overall.add(predicted, measured);
      ++result.observations;
    };
    for (const auto& g : as_measured.compute) {
      if (g.run != &run) continue;
      const auto [i, j] = run.program.partition.at(g.stage);
      double predicted = 0;
      switch (g.pass) {
        case pm::Pass::Forward: predicted = costs.forward_s(i, j, g.stage); break;
        case pm::Pass::ForwardNoGrad: predicted = costs.forward_nograd_s(i, j, g.stage); break;
        case pm::Pass::Recompute: predicted = costs.recompute_s(i, j, g.stage); break;
        case pm::Pass::Backward: predicted = costs.backward_s(i, j, g.stage); break;
      }
      predicted += cold_s_per_byte * g.cold_bytes;
      add(std::string(pm::pass_name(g.pass)), predicted, g.measured);
    }
    for (const auto& g : as_measured.steps) {
      if (g.run != &run) continue;
      const auto [i, j] = run.program.partition.at(g.stage);
      add("step", costs.step_s(i, j, g.stage), g.measured);
    }
    for (const auto& g : links) {
      if (g.run != &run) continue;
      add("send", hw.device.transfer_overhead_s + (hw.device.send_bandwidth > 0 ? g.bytes / hw.device.send_bandwidth : 0),
          g.send);
      const int to = g.forward ? g.stage + 1 : g.stage - 1;
      const double take = hw.device.recv_seconds(g.bytes);
      if (g.waited > 0) {
        add("transfer", hw.topology.path(run.program.rank_of(ps::StageId{g.stage}).value,
                                         run.program.rank_of(ps::StageId{to}).value).seconds(g.bytes),
            g.flight);
      }
      if (g.arrived > 0) add("receive", take, g.take);
    }
  }
  for (auto& [_, r] : result.residuals) r.finish();
  for (auto& [_, r] : result.shared_core_residuals) r.finish();
  result.overall.finish();
  for (const auto& c : result.coefficients) {
    if (c.how != "fitted" && c.how.rfind("median", 0) != 0) result.notes.push_back(c.name + ": " + c.how);
  }
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

namespace {

std::string stats_yaml(const ResidualStats& r) {
  using pm::yaml_number;
  return "{count: " + std::to_string(r.count) + ", rms_us: " + yaml_number(r.rms_s * 1e6) +
         ", max_us: " + yaml_number(r.max_s * 1e6) + ", rms_rel: " + yaml_number(r.rms_rel) +
         ", max_rel: " + yaml_number(r.max_rel) + "}";
}

}  // namespace

std::string calibration_yaml(const FitResult& f, const std::vector<TraceRun>& runs,
                             const std::vector<double>& predicted_step_s, const std::vector<std::string>& engines) {
  std::string out = "calibration:\n";
  out += "  fitted_on:\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    out += "    - file: " + pm::yaml_quoted(r.path) + "\n";
    out += "      producer: " + pm::yaml_quoted(r.producer) + "\n";
    out += "      model: " + pm::yaml_quoted(r.model.name) + "\n";
    out += "      schedule: " + r.program.schedule + "\n";
    out += "      ranks: " + std::to_string(r.program.num_ranks) + "\n";
    out += "      stages_per_rank: " + std::to_string(r.program.stages_per_rank) + "\n";
    out += "      microbatches: " + std::to_string(r.program.num_microbatches) + "\n";
    out += "      microbatch_size: " + std::to_string(r.microbatch_size) + "\n";
    out += "      recompute: " + std::string(ps::recompute_name(r.program.recompute)) + "\n";
    out += "      partition: [" + partition_text(r.program.partition, ", ") + "]\n";
    if (!r.threads.empty()) out += "      threads: " + std::to_string(r.threads.front()) + "\n";
    out += "      measured_step_s: " + pm::yaml_number(r.step_time_s) + "\n";
    if (i < predicted_step_s.size()) {
      out += "      predicted_step_s: " + pm::yaml_number(predicted_step_s[i]) + "\n";
      out += "      step_error: " + pm::yaml_number(predicted_step_s[i] / r.step_time_s - 1) + "\n";
      if (i < engines.size()) out += "      engine: " + engines[i] + "\n";
    }
  }
  out += "  observations: " + std::to_string(f.observations) + "   # per-stage medians of the step's actions\n";
  out += "  residuals:   # predicted - measured, per op kind\n";
  out += "    overall: " + stats_yaml(f.overall) + "\n";
  for (const auto& [op, r] : f.residuals) out += "    " + op + ": " + stats_yaml(r) + "\n";
  if (!f.shared_core_residuals.empty()) {
    out += "  residuals_shared_cores:   # runs whose ranks shared cores: each action as if alone (its share of the cores)\n";
    for (const auto& [op, r] : f.shared_core_residuals) out += "    " + op + ": " + stats_yaml(r) + "\n";
  }
  out += "  coefficients:\n";
  for (const auto& c : f.coefficients) {
    out += "    - {name: " + c.name + ", value: " + pm::yaml_number(c.value) + ", how: " + pm::yaml_quoted(c.how) + "}\n";
  }
  if (!f.notes.empty()) {
    out += "  notes:\n";
    for (const auto& n : f.notes) out += "    - " + pm::yaml_quoted(n) + "\n";
  }
  return out;
}

}  // namespace pipetwin::calibration
