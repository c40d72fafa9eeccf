// The compute part of fit(): the first forward's cold read of weights, the
// curves per layer kind and pass (one least-squares problem per pass), how
// much longer compute takes with more ranks than cores, and the device's
// efficiencies and action overheads from the curves.
#include "calibration/fit_parts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "calibration/least_squares.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"

namespace pipetwin::calibration::fitting {
namespace pm = pipetwin::models;

namespace {

// One pass's problem (the forward's holds the recompute's rows too), and
// where its parameters are: slopes (largest kind first) from 0, the action
// overhead at `action`, the recompute's at `recompute_action` (with_recompute),
// each kind's seconds per layer from `layer0`.
struct PassProblem {
  Problem prob;
  bool with_recompute = false;
  std::size_t action = 0, recompute_action = 0, layer0 = 0;
  std::optional<std::size_t> stream;  // seconds per weight byte (not pooled), the last
  bool seen[2] = {false, false};  // forward rows, recompute rows
};

PassProblem pass_parameters(const std::vector<std::string>& kinds, pm::Pass pass, double base_peak, bool pooled) {
  PassProblem out;
  out.with_recompute = pass == pm::Pass::Forward;
  Problem& prob = out.prob;
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
  out.action = kinds.size();
  out.recompute_action = prob.params.size();  // with_recompute: the recompute's cost per action
  if (out.with_recompute) {
    prob.params.push_back(non_negative("action.recompute_s", "every stage of these traces holds the same layers"));
  }
  out.layer0 = prob.params.size();  // each kind's seconds per layer, from here
  for (const auto& kind : kinds) {
    prob.params.push_back(non_negative(kind + "." + pname + (pooled ? ".seconds_per_operator" : ".seconds_per_layer"),
                                       "cannot be told apart from the other fixed costs with these partitions"));
  }
  // Last, so that where a stage's weight bytes are a sum of its layers (each
  // kind's layers of one size) the fixed costs per layer keep that time.
  if (!pooled) {
    out.stream = prob.params.size();
    prob.params.push_back(non_negative("weights." + pname + ".seconds_per_byte",
                                       "these partitions do not vary a stage's weights apart from its layers"));
  }
  return out;
}

// A row per compute group of the pass (and of the recompute, with_recompute):
// per kind its work and its layers, 1 for the action, its weight bytes.
// `pooled`: every layer's work and count under the one kind kinds[0], the
// weights' time taken off the measurement at `stream`'s seconds per byte.
void add_rows(PassProblem& pp, const Observations& obs, const std::vector<std::string>& kinds, pm::Pass pass,
              bool pooled, const std::map<pm::Pass, double>* stream) {
  const auto rows_of = [&](pm::Pass p) { return p == pass || (pp.with_recompute && p == pm::Pass::Recompute); };
  Problem& prob = pp.prob;
  for (const auto& g : obs.compute) {
    if (!rows_of(g.pass)) continue;
    pp.seen[g.pass == pm::Pass::Recompute] = true;
    std::vector<double> x(prob.params.size(), 0);
    const auto [i, j] = g.run->program.partition.at(g.stage);
    double bytes = 0;
    for (int l = i; l < j; ++l) {
      const auto& layer = g.run->model.layers[l];
      const double w = pass_flops(layer, pass) * g.run->microbatch_size;
      if (w <= 0) continue;
      bytes += pm::pass_weight_bytes(g.run->model, l);
      const std::size_t k =
          pooled ? 0 : std::find(kinds.begin(), kinds.end(), std::string(pm::kind_name(layer.kind))) - kinds.begin();
      x[k] += w;
      // Pooled, the fixed cost is per operator: kinds of many (a block) and
      // of few (a linear layer) share it in proportion.
      x[pp.layer0 + k] += pooled ? pm::operators(g.run->model, l) : 1;
    }
    x[g.pass == pm::Pass::Recompute ? pp.recompute_action : pp.action] = g.actions;
    if (pp.stream) x[*pp.stream] = bytes;
    double taken = 0;
    if (stream != nullptr && stream->count(g.pass)) taken = stream->at(g.pass) * bytes;
    prob.x.push_back(x);
    prob.y.push_back(g.measured - taken);
  }
}

// The solved pass into the fit: its loss, each observed kind's curve, the
// action overheads, the fastest FLOP/s, the coefficients.
void take_solution(ComputeFit& out, const PassProblem& pp, const Solution& sol, const std::vector<std::string>& kinds,
                   pm::Pass pass) {
  const Problem& prob = pp.prob;
  const bool with_recompute = pp.with_recompute;
  for (std::size_t i = 0; i < prob.y.size(); ++i) {
    out.loss += huber_loss(std::abs(predict_row(prob, sol, i) - prob.y[i]) / std::max(prob.y[i], 1e-12));
  }
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    bool observed = false;
    for (const auto& x : prob.x) observed = observed || x[k] > 0;
    if (!observed) continue;
    const std::pair<double, double> curve{sol.value[k], sol.value[pp.layer0 + k]};
    if (pp.seen[0] || !with_recompute) out.curves[pass][kinds[k]] = curve;
    if (with_recompute && pp.seen[1]) out.curves[pm::Pass::Recompute][kinds[k]] = curve;
    if (sol.how[k] == "fitted") out.fastest = std::max(out.fastest, 1 / sol.value[k]);
  }
  const double stream = pp.stream ? sol.value[*pp.stream] : 0;
  if (pp.seen[0] || !with_recompute) out.action[pass] = sol.value[pp.action], out.stream[pass] = stream;
  if (with_recompute && pp.seen[1]) {
    out.action[pm::Pass::Recompute] = sol.value[pp.recompute_action];
    out.stream[pm::Pass::Recompute] = stream;
  }
  record(out.coefficients, prob, sol);
}

// Each stage's first forward in a step: how long its weights take to read
// back (least squares through 0 of its extra on its weight bytes), from runs
// with a core per rank where there are such stages. Returns seconds per byte
// (the base device's when nothing tells it).
double fit_cold_weights(const Inputs& in, const Observations& observed, pm::Device& device, FitResult& result) {
  const pm::Hardware& base = in.base;
  double cold_s_per_byte = 0;
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
  return cold_s_per_byte;
}

// The device's curves from the actions that ran alone; every action when
// some pass has none (then the sharing is in the curves).
void alone_or_every(const std::vector<TraceRun>& runs, Observations& observed, std::vector<std::string>& notes) {
  Observations every = compute_observations(runs, true);
  std::set<pm::Pass> with, wanted;
  for (const auto& g : observed.compute) with.insert(g.pass);
  for (const auto& g : every.compute) wanted.insert(g.pass);
  if (with != wanted) {
    observed = std::move(every);
    notes.push_back("some pass has no action that ran alone: the curves are fitted on every action, "
                    "whatever the ranks computing at the same time");
  } else if (observed.shared_actions > 0) {
    notes.push_back(std::to_string(observed.shared_actions) +
                    " compute actions ran while another rank computed: the curves leave them out; "
                    "how the ranks share the host is fitted from the step times (fit_sharing)");
    for (const auto& n : never_alone_notes(observed, every, runs.front().model)) notes.push_back(n);
  }
}

// A group of a first forward without its cold read, over `over`.
double net(const ComputeGroup& g, double over, double cold_s_per_byte) {
  return g.measured / over - cold_s_per_byte * g.cold_bytes;
}

// With more ranks than cores, a forward or backward that ran alone still took longer
// than in a run with a core per rank (the other processes and the
// transport's threads wake on the same cores): m = (1 + x) p + y for an
// action the curves give p, x a share of its work and y a time per action
// (its rank resuming on a core another process has just left). The curves
// take those actions as (m - y) / (1 + x), refitted until x and y settle.
// With those runs at two micro-batch sizes or more, x and y are fitted by
// least squares on the actions' relative errors (neither below 0); at one
// size they cannot be told apart, and y is 0, x the ratio of the actions'
// total to the curves', less one. Returns {x, y}.
//
// A share alone, fitted on micro-batches of one, charged micro-batches of
// eight 64% of a far longer action: llama-small's four ranks on two cores
// were predicted 57% and 69% slow (docs/calibration.md, "B's four-rank
// slowdown as a share of the work").
//
// Where the actions that ran alone in runs with a core per rank do not pin
// the curves of those actions' layers, the curves follow the divided actions
// down each round, their prediction p falls with them, and x runs away
// (mlp-small's microbenchmarks: p fell to 1/700 of its first value and x
// reached 840 in 100 rounds). Then x cannot be told from the curves: once p
// falls below half its first value, the curves are fitted on the actions
// undivided and x and y are 0, said in `notes`.
std::pair<double, double> fit_oversubscribed_compute(const Inputs& in, Curves& c, double base_peak,
                                                     std::vector<std::string>& notes) {
  double slower = 0, action = 0, first = 0;
  Observations& observed = c.observed;
  const Observations& as_measured = c.as_measured;
  const Observations undivided = c.observed;
  const ComputeFit undivided_fit = c.fit;
  std::set<int> sizes;
  for (const auto& g : as_measured.compute) {
    if (in.shared(*g.run)) sizes.insert(g.run->microbatch_size);
  }
  const bool both = sizes.size() >= 2;
  for (int round = 0; round < 100; ++round) {
    double m = 0, p = 0;
    // Weighted normal equations of m - p = x p + y, each row over m.
    double spp = 0, sp1 = 0, s11 = 0, spy = 0, s1y = 0;
    for (const auto& g : as_measured.compute) {
      if (!in.shared(*g.run)) continue;
      const double pg = group_seconds(c.fit, g) + c.cold_s_per_byte * g.cold_bytes;
      m += g.measured;
      p += pg;
      if (!(g.measured > 0)) continue;
      const double w = 1 / (g.measured * g.measured), r = g.measured - pg;
      spp += w * pg * pg, sp1 += w * pg, s11 += w, spy += w * pg * r, s1y += w * r;
    }
    if (round == 0) first = p;
    if (p < 0.5 * first) {
      observed = undivided;
      c.fit = undivided_fit;
      char fell[32];
      std::snprintf(fell, sizeof fell, "%.0f%%", 100 * p / first);
      notes.push_back("oversubscribed.compute: 0, not fitted: the curves followed the divided actions of the runs with "
                      "more ranks than cores (their prediction fell to " + std::string(fell) + " in " +
                      std::to_string(round) + " rounds; no run with a core per rank pins those layers)");
      return {0, 0};
    }
    double next = p > 0 ? std::max(0.0, m / p - 1) : 0, next_action = 0;
    const double det = spp * s11 - sp1 * sp1;
    if (both && det > 1e-12 * spp * s11) {
      next = (spy * s11 - sp1 * s1y) / det;
      next_action = (spp * s1y - sp1 * spy) / det;
      if (next < 0) next = 0, next_action = std::max(0.0, s1y / s11);
      if (next_action < 0) next_action = 0, next = std::max(0.0, spy / spp);
    }
    const bool settled = std::abs(next - slower) < 1e-9 && std::abs(next_action - action) < 1e-12;
    slower = next, action = next_action;
    for (std::size_t i = 0; i < observed.compute.size(); ++i) {
      if (in.shared(*observed.compute[i].run)) {
        ComputeGroup g = as_measured.compute[i];
        g.measured = std::max(0.0, g.measured - action);
        observed.compute[i].measured = net(g, 1 + slower, c.cold_s_per_byte);
      }
    }
    c.fit = fit_compute(observed, c.kinds, base_peak);
    if (settled) break;
  }
  return {slower, action};
}

}  // namespace

ComputeFit fit_compute(const Observations& obs, const std::vector<std::string>& kinds, double base_peak, bool pooled,
                       const std::map<pm::Pass, double>* stream) {
  ComputeFit out;
  out.fastest = base_peak;
  for (const pm::Pass pass : pm::kPasses) {
    // A recompute is its stage's forward with autograd again: one problem
    // for both, the layers' curves shared, each pass its own cost per action
    // (a kind whose recompute rows alone could not be told apart, such as
    // the embedding, which only stage 0 holds, takes the forward's rows too).
    if (pass == pm::Pass::Recompute) continue;
    PassProblem pp = pass_parameters(kinds, pass, base_peak, pooled);
    add_rows(pp, obs, kinds, pass, pooled, stream);
    if (pp.prob.y.empty()) continue;
    take_solution(out, pp, robust_solve(pp.prob), kinds, pass);
  }
  return out;
}

double group_seconds(const ComputeFit& cf, const ComputeGroup& g) {
  const auto curves = cf.curves.find(g.pass);
  const auto action = cf.action.find(g.pass);
  const auto stream = cf.stream.find(g.pass);
  double t = action != cf.action.end() ? action->second * g.actions : 0;
  const auto [i, j] = g.run->program.partition.at(g.stage);
  for (int l = i; l < j; ++l) {
    const auto& layer = g.run->model.layers[l];
    const double w = pass_flops(layer, g.pass) * g.run->microbatch_size;
    if (w <= 0 || curves == cf.curves.end()) continue;
    if (stream != cf.stream.end()) t += stream->second * pm::pass_weight_bytes(g.run->model, l);
    const auto ab = curves->second.find(std::string(pm::kind_name(layer.kind)));
    if (ab == curves->second.end()) continue;
    t += ab->second.first * w + ab->second.second;
  }
  return t;
}

std::vector<std::string> kinds_by_work(const pm::Model& model) {
  std::vector<std::string> kinds;
  std::map<std::string, double> work;
  for (const auto& l : model.layers) work[std::string(pm::kind_name(l.kind))] += l.cost.forward_flops + l.cost.backward_flops();
  for (const auto& [k, _] : work) kinds.push_back(k);
  std::stable_sort(kinds.begin(), kinds.end(), [&](const auto& a, const auto& b) { return work[a] > work[b]; });
  return kinds;
}

Curves fit_curves(const Inputs& in, double base_peak, pm::Device& device, FitResult& result) {
  Curves c;
  c.kinds = kinds_by_work(in.runs.front().model);
  c.observed = compute_observations(in.runs, false);
  c.cold_s_per_byte = fit_cold_weights(in, c.observed, device, result);
  alone_or_every(in.runs, c.observed, result.notes);
  c.as_measured = c.observed;  // undivided, with the first forwards' cold reads, for the residuals
  for (auto& g : c.observed.compute) g.measured = net(g, 1, c.cold_s_per_byte);
  c.fit = fit_compute(c.observed, c.kinds, base_peak);
  const auto shared = [&](const ComputeGroup& g) { return in.shared(*g.run); };
  if (!in.all_shared && in.base.topology.kind == pm::TopologyKind::SharedHost &&
      std::any_of(c.observed.compute.begin(), c.observed.compute.end(), shared)) {
    std::tie(c.slower, c.slower_action_s) = fit_oversubscribed_compute(in, c, base_peak, result.notes);
    result.coefficients.push_back({"oversubscribed.compute", c.slower,
                                   "how much longer the compute actions that ran alone took in runs with more ranks than "
                                   "cores than the curves say, as a share of their work"});
    result.coefficients.push_back({"oversubscribed.action_s", c.slower_action_s,
                                   "and as a time per action (0 where those runs hold one micro-batch size: the two "
                                   "cannot be told apart)"});
  }
  for (const auto& coefficient : c.fit.coefficients) result.coefficients.push_back(coefficient);
  // Every kind at once, one curve per pass: what the simulator falls back on
  // for a layer of a kind these traces do not hold (another model's).
  // The weights' streaming is the per-kind fit's (this fit cannot tell it
  // from the pooled fixed cost per operator).
  c.pooled = fit_compute(c.observed, {std::string(pm::kDefaultKind)}, base_peak, true, &c.fit.stream);
  return c;
}

namespace {

// A fit's values per pass as the device's fields: forward and backward (0
// where not fitted), forward_nograd and recompute where fitted (else they
// default to the forward's).
pm::ActionOverheads per_pass(const std::map<pm::Pass, double>& fitted) {
  const auto at = [&](pm::Pass p) { return fitted.count(p) ? std::optional<double>(fitted.at(p)) : std::nullopt; };
  return {at(pm::Pass::Forward).value_or(0), at(pm::Pass::Backward).value_or(0), at(pm::Pass::ForwardNoGrad),
          at(pm::Pass::Recompute)};
}

}  // namespace

void set_device_curves(Curves& c, double base_peak, pm::Precision precision, pm::Device& device,
                       std::vector<std::string>& notes) {
  auto& curves = c.fit.curves;
  auto& action = c.fit.action;
  // Forward without data (every run recomputes): the recompute is the same forward, with autograd.
  if (!curves.count(pm::Pass::Forward) && curves.count(pm::Pass::Recompute)) {
    curves[pm::Pass::Forward] = curves[pm::Pass::Recompute];
    action[pm::Pass::Forward] = action[pm::Pass::Recompute];
    c.fit.stream[pm::Pass::Forward] = c.fit.stream[pm::Pass::Recompute];
    curves.erase(pm::Pass::Recompute);
    action.erase(pm::Pass::Recompute);
    c.fit.stream.erase(pm::Pass::Recompute);
    notes.push_back("no forward with autograd outside recompute: the recompute's fit is used for both");
  }
  if (!curves.count(pm::Pass::Forward) || !curves.count(pm::Pass::Backward)) {
    throw Error("calibrate: the traces hold no forward or no backward actions to fit (I/W-split schedules are not fitted)");
  }
  // The peak raised to the fastest kind, the curves as efficiencies.
  const double peak = c.fit.fastest;
  if (peak > base_peak) {
    notes.push_back("peak FLOP/s (" + std::string(pm::precision_name(precision)) + ") raised from " +
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
  for (const auto& kind : c.kinds) {
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
  auto& pooled = c.pooled.curves;
  if (pooled.count(pm::Pass::Forward) && pooled.count(pm::Pass::Backward)) {
    const std::string d(pm::kDefaultKind);
    pm::KindEfficiency k{efficiency(pooled[pm::Pass::Forward].at(d)), efficiency(pooled[pm::Pass::Backward].at(d)), {}, {}};
    k.per_operator = true;
    if (pooled.count(pm::Pass::ForwardNoGrad)) k.forward_nograd = efficiency(pooled[pm::Pass::ForwardNoGrad].at(d));
    if (pooled.count(pm::Pass::Recompute)) k.recompute = efficiency(pooled[pm::Pass::Recompute].at(d));
    device.kinds[d] = k;
  }
  device.op_overhead_s = 0;  // the fixed cost per layer is in each kind's curve
  device.action_overhead = per_pass(action);
  const auto& stream = c.fit.stream;
  const bool streams = std::any_of(stream.begin(), stream.end(), [](const auto& p) { return p.second > 0; });
  device.weight_stream = streams ? per_pass(stream) : pm::ActionOverheads{};
}

}  // namespace pipetwin::calibration::fitting
