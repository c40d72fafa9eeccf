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

// The transfers of one (sender stage, direction): what their sends took,
// and their receives relative to the end of the matching send.
struct Receive {
  double start = 0, end = 0;  // after the send's end (negative: posted before)
  double uncertainty = 0;     // of the two ranks' aligned clocks
};
struct LinkGroup {
  const TraceRun* run = nullptr;
  int stage = 0;    // the sender
  bool forward = true;
  double bytes = 0;
  double send = 0;  // median SEND
  std::vector<double> sends;  // every SEND
  std::vector<Receive> receives;
  // Receives that were waiting when the message was sent: end (latency +
  // bytes / bandwidth + the receiver's cost); those that started after it had
  // arrived: duration (the receiver's cost). Medians; count 0 when none.
  double flight = 0, take = 0;
  int waited = 0, arrived = 0;
};

// A link whose transfers take no time per byte (the send holds them).
constexpr double kUnbounded = 1e18;  // bytes/s

// Per pass: each kind's (seconds per FLOP, seconds per layer): the time of
// one layer invocation, affine in its work w = FLOPs x micro-batch size;
// the action's overhead; the fastest FLOP/s a kind reached; the fit's loss
// (Huber at 5% on relative residuals).
struct ComputeFit {
  std::map<pm::Pass, std::map<std::string, std::pair<double, double>>> curves;
  std::map<pm::Pass, double> action;
  std::vector<Coefficient> coefficients;
  double fastest = 0;
  double loss = 0;
};

// Every parameter of a solved problem, as the coefficients the file records.
void record(std::vector<Coefficient>& into, const Problem& prob, const Solution& sol) {
  for (std::size_t j = 0; j < prob.params.size(); ++j) into.push_back({prob.params[j].name, sol.value[j], sol.how[j]});
}

ComputeFit fit_compute(const Observations& obs, const std::vector<std::string>& kinds, double base_peak) {
  ComputeFit out;
  out.fastest = base_peak;
  for (const pm::Pass pass : pm::kPasses) {
    // A recompute is its stage's forward with autograd again: one problem
    // for both, the layers' curves shared, each pass its own cost per action
    // (a kind whose recompute rows alone could not be told apart, such as
    // the embedding, which only stage 0 holds, takes the forward's rows too).
    if (pass == pm::Pass::Recompute) continue;
    const bool with_recompute = pass == pm::Pass::Forward;
    const auto rows_of = [&](pm::Pass p) { return p == pass || (with_recompute && p == pm::Pass::Recompute); };
    Problem prob;
    const std::string pname(pm::pass_name(pass));
    // Parameters: slopes (largest kind first), the action overhead, per-layer overheads.
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      Param a;
      a.name = kinds[k] + "." + pname + ".seconds_per_flop";
      a.on_dependent = k == 0 ? Param::OnDependent::FixValue : Param::OnDependent::Tie;
      a.fixed_value = 1 / base_peak;
      a.tie_to = 0;
      a.why_dependent = "these traces do not vary this kind's work apart from the others'";
      a.lower = 0;
      a.strictly_above = true;
      a.bound_value = 1 / base_peak;
      a.why_bounded = "bounded at the peak (max 1): its fitted slope was not positive";
      prob.params.push_back(a);
    }
    prob.params.push_back(non_negative("action." + pname + "_s", "every stage of these traces holds the same layers"));
    const std::size_t nk = kinds.size();
    const std::size_t recompute_action = prob.params.size();  // with_recompute: the recompute's cost per action
    if (with_recompute) {
      prob.params.push_back(non_negative("action.recompute_s", "every stage of these traces holds the same layers"));
    }
    const std::size_t layer0 = prob.params.size();  // each kind's seconds per layer, from here
    for (const auto& kind : kinds) {
      prob.params.push_back(non_negative(kind + "." + pname + ".seconds_per_layer",
                                         "cannot be told apart from the other fixed costs with these partitions"));
    }
    bool seen[2] = {false, false};  // forward rows, recompute rows
    for (const auto& g : obs.compute) {
      if (!rows_of(g.pass)) continue;
      seen[g.pass == pm::Pass::Recompute] = true;
      std::vector<double> x(prob.params.size(), 0);
      const auto [i, j] = g.run->program.partition.at(g.stage);
      for (int l = i; l < j; ++l) {
        const auto& layer = g.run->model.layers[l];
        const double w = pass_flops(layer, pass) * g.run->microbatch_size;
        if (w <= 0) continue;
        const std::size_t k = std::find(kinds.begin(), kinds.end(), std::string(pm::kind_name(layer.kind))) - kinds.begin();
        x[k] += w;
        x[layer0 + k] += 1;
      }
      x[g.pass == pm::Pass::Recompute ? recompute_action : nk] = 1;
      prob.x.push_back(x);
      prob.y.push_back(g.measured);
    }
    if (prob.y.empty()) continue;
    const Solution sol = robust_solve(prob);
    for (std::size_t i = 0; i < prob.y.size(); ++i) {
      const double r = std::abs(predict_row(prob, sol, i) - prob.y[i]) / std::max(prob.y[i], 1e-12);
      out.loss += r <= 0.05 ? 0.5 * r * r : 0.05 * (r - 0.025);
    }
    for (std::size_t k = 0; k < nk; ++k) {
      bool observed = false;
      for (const auto& x : prob.x) observed = observed || x[k] > 0;
      if (!observed) continue;
      const std::pair<double, double> curve{sol.value[k], sol.value[layer0 + k]};
      if (seen[0] || !with_recompute) out.curves[pass][kinds[k]] = curve;
      if (with_recompute && seen[1]) out.curves[pm::Pass::Recompute][kinds[k]] = curve;
      if (sol.how[k] == "fitted") out.fastest = std::max(out.fastest, 1 / sol.value[k]);
    }
    if (seen[0] || !with_recompute) out.action[pass] = sol.value[nk];
    if (with_recompute && seen[1]) out.action[pm::Pass::Recompute] = sol.value[recompute_action];
    record(out.coefficients, prob, sol);
  }
  return out;
}

// A compute group's time as a fit's curves give it (its row of fit_compute's
// problem: the action's overhead, and per layer with work a w + b).
double group_seconds(const ComputeFit& cf, const ComputeGroup& g) {
  const auto curves = cf.curves.find(g.pass);
  const auto action = cf.action.find(g.pass);
  double t = action != cf.action.end() ? action->second : 0;
  const auto [i, j] = g.run->program.partition.at(g.stage);
  for (int l = i; l < j; ++l) {
    const auto& layer = g.run->model.layers[l];
    const double w = pass_flops(layer, g.pass) * g.run->microbatch_size;
    if (w <= 0 || curves == cf.curves.end()) continue;
    const auto ab = curves->second.find(std::string(pm::kind_name(layer.kind)));
    if (ab == curves->second.end()) continue;
    t += ab->second.first * w + ab->second.second;
  }
  return t;
}

}  // namespace

FitResult fit(const std::vector<TraceRun>& runs, const pm::Hardware& given) {
  check_together(runs);
  FitResult result;
  // A shared host has the cores the traces were measured with, not the base's.
  pm::Hardware base = given;
  if (const int cores = base.topology.kind == pm::TopologyKind::SharedHost ? recorded_host_cores(runs) : 0;
      cores > 0 && cores != base.topology.host_cores) {
    result.notes.push_back("host_cores " + std::to_string(cores) + ", as the traces' ranks recorded (the base hardware '" +
                           given.name + "' has " + std::to_string(given.topology.host_cores) + ")");
    base.topology.host_cores = cores;
  }
  if (base.topology.kind == pm::TopologyKind::SharedHost) {
    for (const auto& run : runs) {
      std::set<std::string> hosts(run.hosts.begin(), run.hosts.end());
      hosts.erase("");
      if (hosts.size() < 2) continue;
      result.notes.push_back(run.path + ": its ranks ran on " + std::to_string(hosts.size()) + " hosts (" + *hosts.begin() +
                             ", " + *std::next(hosts.begin()) + (hosts.size() > 2 ? ", ..." : "") +
                             "), but the base hardware is one shared host: the fit and its replays take every rank "
                             "as a process of that host; start from a hardware file of several hosts instead");
      break;
    }
  }
  const pm::Model& model = runs.front().model;
  const pm::Precision precision = model.precision;
  pm::Device device = base.device;
  const double base_peak = device.peak_flops(precision);
  if (!(base_peak > 0)) throw Error("calibrate: the base hardware's device has no peak FLOP/s for " + std::string(pm::precision_name(precision)));

  // Transfers come from runs whose ranks each had a core (their sends and
  // receives are not delayed waiting for one), unless there are none.
  std::vector<const TraceRun*> unshared;
  for (const auto& run : runs) {
    if (!oversubscribed(run, base)) unshared.push_back(&run);
  }
  const bool all_shared = unshared.empty();
  const auto transfers_from = [&](const TraceRun& run) {
    return all_shared || std::find(unshared.begin(), unshared.end(), &run) != unshared.end();
  };

  // --- Compute: the host's capacity for ranks computing at once, and the curves.
  std::vector<std::string> kinds;  // in the order of the model's total work
  {
    std::map<std::string, double> work;
    for (const auto& l : model.layers) work[std::string(pm::kind_name(l.kind))] += l.cost.forward_flops + l.cost.backward_flops();
    for (const auto& [k, _] : work) kinds.push_back(k);
    std::stable_sort(kinds.begin(), kinds.end(), [&](const auto& a, const auto& b) { return work[a] > work[b]; });
  }
  Observations observed = compute_observations(runs, false);
  // First, each stage's first forward in a step: how long its weights take
  // to read back (least squares through 0 of its extra on its weight bytes),
  // from runs with a core per rank where there are such stages.
  double cold_s_per_byte = 0;
  {
    Problem prob;
    prob.params = {non_negative("cold_weights.seconds_per_byte")};
    const bool within = std::any_of(observed.cold.begin(), observed.cold.end(),
                                    [&](const auto& c) { return !oversubscribed(*c.run, base); });
    for (const auto& c : observed.cold) {
      if (within && oversubscribed(*c.run, base)) continue;
      prob.x.push_back({c.bytes});
      prob.y.push_back(c.extra);
    }
    if (!prob.y.empty()) {
      const Solution sol = robust_solve(prob, false);
      cold_s_per_byte = sol.value[0];
      device.cold_weights_bandwidth = cold_s_per_byte > 0 ? 1 / cold_s_per_byte : 0;
      record(result.coefficients, prob, sol);
    } else {
      result.notes.push_back("no stage ran its first forward and two others of the same pass alone: the first forward's "
                             "cold weights keep the base device's cost");
      cold_s_per_byte = device.cold_weights_bandwidth > 0 ? 1 / device.cold_weights_bandwidth : 0;
    }
  }
  // The device's curves from the actions that ran alone; every action when
  // some pass has none (then the sharing is in the curves).
  {
    Observations every = compute_observations(runs, true);
    std::set<pm::Pass> with, wanted;
    for (const auto& g : observed.compute) with.insert(g.pass);
    for (const auto& g : every.compute) wanted.insert(g.pass);
    if (with != wanted) {
      observed = std::move(every);
      result.notes.push_back("some pass has no action that ran alone: the curves are fitted on every action, "
                             "whatever the ranks computing at the same time");
    } else if (observed.shared_actions > 0) {
      result.notes.push_back(std::to_string(observed.shared_actions) +
                             " compute actions ran while another rank computed: the curves leave them out; "
                             "how the ranks share the host is fitted from the step times (fit_sharing)");
      for (const auto& n : never_alone_notes(observed, every, model)) result.notes.push_back(n);
    }
  }
  const auto is_shared = [&](const TraceRun& run) { return oversubscribed(run, base); };
  // With more ranks than cores, an action that ran alone still took longer
  // than in a run with a core per rank (the other processes and the
  // transport's threads wake on the same cores): the curves take those
  // actions divided by 1 + x, x the ratio of their total to the curves'
  // (refitted until it settles), and the topology records x.
  double slower = 0;
  const Observations as_measured = observed;  // undivided, with the first forwards' cold reads, for the residuals
  // A group of a first forward without its cold read, over `over`.
  const auto net = [&](const ComputeGroup& g, double over) { return g.measured / over - cold_s_per_byte * g.cold_bytes; };
  for (auto& g : observed.compute) g.measured = net(g, 1);
  ComputeFit cf = fit_compute(observed, kinds, base_peak);
  if (!all_shared && base.topology.kind == pm::TopologyKind::SharedHost &&
      std::any_of(observed.compute.begin(), observed.compute.end(), [&](const ComputeGroup& g) { return is_shared(*g.run); })) {
    for (int round = 0; round < 100; ++round) {
      double m = 0, p = 0;
      for (const auto& g : as_measured.compute) {
        if (!is_shared(*g.run)) continue;
        m += g.measured;
        p += group_seconds(cf, g) + cold_s_per_byte * g.cold_bytes;
      }
      const double next = p > 0 ? std::max(0.0, m / p - 1) : 0;
      const bool settled = std::abs(next - slower) < 1e-9;
      slower = next;
      for (std::size_t i = 0; i < observed.compute.size(); ++i) {
        if (is_shared(*observed.compute[i].run)) observed.compute[i].measured = net(as_measured.compute[i], 1 + slower);
      }
      for (std::size_t i = 0; i < observed.steps.size(); ++i) {
        if (is_shared(*observed.steps[i].run)) observed.steps[i].measured = as_measured.steps[i].measured / (1 + slower);
      }
      cf = fit_compute(observed, kinds, base_peak);
      if (settled) break;
    }
    result.coefficients.push_back({"oversubscribed.compute", slower,
                                   "how much longer the compute actions that ran alone took in runs with more ranks than "
                                   "cores than the curves say"});
  }
  const auto& steps = observed.steps;
  if (!all_shared && unshared.size() < runs.size()) {
    result.notes.push_back(std::to_string(runs.size() - unshared.size()) +
                           " run(s) with more ranks x threads than the host's cores: their transfers are not fitted");
  }
  auto& curves = cf.curves;
  auto& action = cf.action;
  const double fastest = cf.fastest;
  for (const auto& c : cf.coefficients) result.coefficients.push_back(c);

  // --- Transfers: per (sender stage, direction), from the paced timelines.
  std::vector<LinkGroup> links;
  for (const auto& run : runs) {
    const auto& p = run.program;
    const ps::Timeline timeline = paced(run.trace.timeline);
    std::map<ps::MessageKey, std::pair<int, ps::TimedAction>> sends;  // key -> (rank, action)
    for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
      for (const auto& a : timeline.ranks[r]) {
        if (ps::is_send(a.action.op)) sends[ps::message_of(a.action)] = {static_cast<int>(r), a};
      }
    }
    const pm::StageCostModel probe(run.model, base, request_of(run));
    std::map<std::pair<int, bool>, std::vector<Receive>> receives;
    std::map<std::pair<int, bool>, std::vector<double>> send_durations;
    for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
      for (const auto& a : timeline.ranks[r]) {
        if (!ps::is_recv(a.action.op)) continue;
        const auto it = sends.find(ps::message_of(a.action));
        if (it == sends.end()) continue;
        const ps::TimedAction& send = it->second.second;
        receives[{send.action.stage.value, send.action.op == ps::Op::SEND_F}].push_back(
            {a.start - send.end, a.end - send.end,
             run.clock_uncertainty_s.at(r) + run.clock_uncertainty_s.at(it->second.first)});
      }
    }
    for (const auto& [key, entry] : sends) {
      const auto& a = entry.second.action;
      send_durations[{a.stage.value, a.op == ps::Op::SEND_F}].push_back(entry.second.end - entry.second.start);
    }
    for (const auto& [key, durations] : send_durations) {
      const auto [s, forward] = key;
      const auto [i, j] = p.partition.at(s);
      LinkGroup g;
      g.run = &run;
      g.stage = s;
      g.forward = forward;
      g.bytes = probe.cut_bytes(forward ? j : i);
      g.send = median(durations);
      g.sends = durations;
      g.receives = receives[key];
      links.push_back(g);
    }
  }

  // Forward without data (every run recomputes): the recompute is the same forward, with autograd.
  if (!curves.count(pm::Pass::Forward) && curves.count(pm::Pass::Recompute)) {
    curves[pm::Pass::Forward] = curves[pm::Pass::Recompute];
    action[pm::Pass::Forward] = action[pm::Pass::Recompute];
    curves.erase(pm::Pass::Recompute);
    action.erase(pm::Pass::Recompute);
    result.notes.push_back("no forward with autograd outside recompute: the recompute's fit is used for both");
  }
  if (!curves.count(pm::Pass::Forward) || !curves.count(pm::Pass::Backward)) {
    throw Error("calibrate: the traces hold no forward or no backward actions to fit (I/W-split schedules are not fitted)");
  }

  // --- The device: peak raised to the fastest kind, curves as efficiencies.
  const double peak = fastest;
  if (peak > base_peak) {
    result.notes.push_back("peak FLOP/s (" + std::string(pm::precision_name(precision)) + ") raised from " +
                           pm::yaml_number(base_peak) + " to " + pm::yaml_number(peak) +
                           ": a kind ran faster than the base device's peak");
    if (precision == pm::Precision::FP32) {
      device.peak_flops_fp32 = peak;
      device.peak_flops_half = std::max(device.peak_flops_half, peak);
    } else {
      device.peak_flops_half = peak;
    }
  }
  // t = a w + b  <=>  eff(w) = max w / (w + half), max = 1 / (a peak), half = b / a.
  const auto efficiency = [&](std::pair<double, double> ab) {
    const auto [a, b] = ab;
    return pm::Efficiency{std::min(1.0, 1 / (a * peak)), b / a, {}};
  };
  device.kinds.clear();
  for (const auto& kind : kinds) {
    if (!curves[pm::Pass::Forward].count(kind) && !curves[pm::Pass::Backward].count(kind)) continue;
    pm::KindEfficiency k{device.efficiency, device.efficiency, {}, {}};
    if (curves[pm::Pass::Forward].count(kind)) k.forward = efficiency(curves[pm::Pass::Forward][kind]);
    if (curves[pm::Pass::Backward].count(kind)) k.backward = efficiency(curves[pm::Pass::Backward][kind]);
    if (curves.count(pm::Pass::ForwardNoGrad) && curves[pm::Pass::ForwardNoGrad].count(kind)) {
      k.forward_nograd = efficiency(curves[pm::Pass::ForwardNoGrad][kind]);
    }
    if (curves.count(pm::Pass::Recompute) && curves[pm::Pass::Recompute].count(kind)) {
      k.recompute = efficiency(curves[pm::Pass::Recompute][kind]);
    }
    device.kinds[kind] = k;
  }
  device.op_overhead_s = 0;  // the fixed cost per layer is in each kind's curve
  device.action_overhead = {action[pm::Pass::Forward], action[pm::Pass::Backward], {}, {}};
  if (action.count(pm::Pass::ForwardNoGrad)) device.action_overhead.forward_nograd_s = action[pm::Pass::ForwardNoGrad];
  if (action.count(pm::Pass::Recompute)) device.action_overhead.recompute_s = action[pm::Pass::Recompute];

  // --- Optimizer step: overhead + traffic / memory bandwidth.
  {
    Problem prob;
    Param slope;
    slope.name = "step.seconds_per_byte";
    slope.on_dependent = Param::OnDependent::FixValue;
    slope.fixed_value = device.memory_bandwidth > 0 ? 1 / device.memory_bandwidth : 0;
    slope.why_dependent = "every stage updates as many parameters: the base memory bandwidth is kept";
    slope.strictly_above = true;
    slope.bound_value = slope.fixed_value;
    slope.why_bounded = "kept from the base (fitted slope not positive)";
    prob.params = {non_negative("step.overhead_s"), slope};
    std::vector<const StepGroup*> rows;
    for (const auto& g : steps) {
      pm::Hardware unit = base;  // step_s on a unit bandwidth is the traffic in bytes
      unit.device.memory_bandwidth = 1;
      unit.device.step_overhead_s = 0;
      unit.devices.clear();
      const pm::StageCostModel probe(g.run->model, unit, request_of(*g.run));
      const auto [i, j] = g.run->program.partition.at(g.stage);
      prob.x.push_back({1, probe.step_s(i, j, g.stage)});
      prob.y.push_back(g.measured);
      rows.push_back(&g);
    }
    if (!rows.empty()) {
      const Solution sol = robust_solve(prob);
      device.step_overhead_s = sol.value[0];
      if (sol.value[1] > 0) device.memory_bandwidth = 1 / sol.value[1];
      record(result.coefficients, prob, sol);
    } else {
      result.notes.push_back("no STEP actions: the optimizer step keeps the base device's cost");
    }
  }

  // --- Transfers: the sender's overhead, then the link's latency and bandwidth.
  pm::Topology topology = base.topology;
  {
    {
      // The sender's cost, affine in the bytes it writes.
      Problem prob;
      prob.params = {non_negative("send.overhead_s"),
                     non_negative("send.seconds_per_byte", "every send carries as many bytes")};
      for (const auto& g : links) {
        if (!transfers_from(*g.run)) continue;
        prob.x.push_back({1, g.bytes});
        prob.y.push_back(g.send);
      }
      if (!prob.y.empty()) {
        const Solution sol = robust_solve(prob);
        device.transfer_overhead_s = sol.value[0];
        device.send_bandwidth = sol.value[1] > 0 ? 1 / sol.value[1] : 0;
        record(result.coefficients, prob, sol);
      }
    }
    // The link, in two passes: first from every receive that was waiting when
    // its send ended, to tell which receives started after their message had
    // arrived; their durations give the receiver's cost (affine in bytes);
    // then the link again from the receives that had waited longer than that
    // cost (a receive ends at max(start + its cost, arrival): the simulator's
    // rule).
    const pm::Link base_link = base.topology.path(0, 1);
    const auto link_fit = [&](const std::function<double(double)>& take, bool keep) {
      Problem prob;
      Param slope;
      slope.name = "link.seconds_per_byte";
      slope.on_dependent = Param::OnDependent::FixValue;
      slope.fixed_value = 1 / base_link.bandwidth;
      slope.why_dependent = "every transfer carries as many bytes: the base bandwidth is kept";
      slope.why_bounded = "bounded at 0: the sender's cost holds the transfer (unbounded link bandwidth)";
      prob.params = {non_negative("link.latency_s"), slope};
      for (auto& g : links) {
        if (!transfers_from(*g.run)) continue;
        // Receives that were waiting when the send ended, and whose own cost
        // (take) would have run out by then: they end with the arrival.
        std::vector<double> flights;
        for (const auto& r : g.receives) {
          if (r.start + r.uncertainty + take(g.bytes) <= 0) flights.push_back(r.end);
        }
        g.waited = static_cast<int>(flights.size());
        if (flights.empty()) continue;
        g.flight = median(flights);
        prob.x.push_back({1, g.bytes});
        prob.y.push_back(g.flight);
      }
      if (prob.y.empty()) return base_link;
      const Solution sol = robust_solve(prob, /*relative=*/false);
      if (keep) {
        record(result.coefficients, prob, sol);
      }
      return pm::Link{sol.value[0], sol.value[1] > 0 ? 1 / sol.value[1] : kUnbounded};
    };
    const pm::Link first = link_fit([](double) { return 0.0; }, false);
    {
      Problem prob;
      prob.params = {non_negative("recv.overhead_s"),
                     non_negative("recv.seconds_per_byte", "every receive takes as many bytes")};
      for (auto& g : links) {
        if (!transfers_from(*g.run)) continue;
        std::vector<double> takes;
        for (const auto& r : g.receives) {
          if (r.start - r.uncertainty >= first.seconds(g.bytes)) takes.push_back(r.end - r.start);
        }
        g.arrived = static_cast<int>(takes.size());
        if (takes.empty()) continue;
        g.take = median(takes);
        prob.x.push_back({1, g.bytes});
        prob.y.push_back(g.take);
      }
      if (!prob.y.empty()) {
        const Solution sol = robust_solve(prob);
        device.recv_overhead_s = sol.value[0];
        device.recv_bandwidth = sol.value[1] > 0 ? 1 / sol.value[1] : 0;
        record(result.coefficients, prob, sol);
      } else if (!links.empty()) {
        result.notes.push_back("no receive started after its message had arrived: taking a message costs nothing");
      }
    }
    bool any_waited = false;
    for (const auto& g : links) any_waited = any_waited || (transfers_from(*g.run) && g.waited > 0);
    if (any_waited) {
      const pm::Link link = link_fit([&](double bytes) { return device.recv_seconds(bytes); }, true);
      if (base.topology.kind != pm::TopologyKind::SharedHost && base.topology.kind != pm::TopologyKind::AllToAll) {
        result.notes.push_back("the link fit sets the topology's intra link; routes of several hops add their latencies");
      }
      topology.intra = link;
    } else if (!links.empty()) {
      result.notes.push_back("no receive was waiting for its message: the link keeps the base latency and bandwidth");
    }
    // With more ranks than cores, a rank that sends or takes a message also
    // waits for a core: the mean excess over the model above (means, not
    // medians: the rare long wait is the cost), from those runs' transfers.
    if (!all_shared && base.topology.kind == pm::TopologyKind::SharedHost) {
      std::vector<double> send_excess, recv_excess;
      const pm::Link link = topology.intra;
      for (const auto& g : links) {
        if (transfers_from(*g.run)) continue;
        const double send_model = device.transfer_overhead_s + (device.send_bandwidth > 0 ? g.bytes / device.send_bandwidth : 0);
        for (const double d : g.sends) send_excess.push_back(d - send_model);
        for (const auto& r : g.receives) {
          if (r.start - r.uncertainty >= link.seconds(g.bytes)) recv_excess.push_back(r.end - r.start - device.recv_seconds(g.bytes));
        }
      }
      const auto mean = [](const std::vector<double>& v) {
        double sum = 0;
        for (const double x : v) sum += x;
        return v.empty() ? 0.0 : std::max(0.0, sum / static_cast<double>(v.size()));
      };
      topology.oversubscribed_compute = slower;
      topology.oversubscribed_send_s = mean(send_excess);
      topology.oversubscribed_recv_s = mean(recv_excess);
      if (!send_excess.empty()) {
        result.coefficients.push_back({"oversubscribed.send_s", topology.oversubscribed_send_s,
                                       "mean excess of " + std::to_string(send_excess.size()) + " sends in runs with more ranks than cores"});
      }
      if (!recv_excess.empty()) {
        result.coefficients.push_back({"oversubscribed.recv_s", topology.oversubscribed_recv_s,
                                       "mean excess of " + std::to_string(recv_excess.size()) +
                                           " receives that found their message, in runs with more ranks than cores"});
      }
    }
  }

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
