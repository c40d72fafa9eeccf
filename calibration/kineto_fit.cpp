// fit_kineto(): torch.profiler runs' attributed costs into a cost table.
#include <algorithm>
#include <map>

#include "calibration/kineto.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;

namespace {

// One time field's samples: (samples per micro-batch, seconds).
using Series = std::vector<std::pair<double, double>>;

struct Line {
  double at_ref = 0;
  std::optional<double> per_sample;  // none: one size only
};

// The mean: a step is the sum of its actions, and the slow ones (a rank
// preempted, its caches cold) are part of it.
double centre(const std::vector<double>& v) {
  double sum = 0;
  for (const double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// The means per size; with two sizes or more the least-squares line
// through them (fixed part and slope kept non-negative).
Line fit_series(const Series& points, double ref) {
  std::map<double, std::vector<double>> by_size;
  for (const auto& [n, v] : points) by_size[n].push_back(v);
  if (by_size.size() == 1) return {centre(by_size.begin()->second), std::nullopt};
  double sn = 0, sv = 0, snn = 0, snv = 0;
  const double k = static_cast<double>(by_size.size());
  for (auto& [n, values] : by_size) {
    const double m = centre(values);
    sn += n, sv += m, snn += n * n, snv += n * m;
  }
  double slope = (k * snv - sn * sv) / (k * snn - sn * sn);
  double fixed = (sv - slope * sn) / k;
  if (slope < 0) {
    slope = 0, fixed = sv / k;
  } else if (fixed < 0) {
    fixed = 0, slope = snv / snn;
  }
  return {fixed + slope * ref, slope};
}

// Every action's cost, by stage and field, from all the runs' steps.
struct Collected {
  std::vector<std::map<std::string, Series>> series;   // [stage][field]
  std::vector<Series> first_forward, other, any_flight;  // [stage]; [cut after the stage]
  std::vector<int> valid_flights;                        // [cut after the stage]
};

const char* field_of(const schedule::Action& action) {
  const int mb = action.microbatch ? action.microbatch->value : 0;
  switch (action.op) {
    case ps::Op::F: return mb == 0 ? nullptr : "forward_s";  // the first of a step apart
    case ps::Op::B: return "backward_s";
    case ps::Op::I: return "input_grad_s";
    case ps::Op::W: return "weight_grad_s";
    case ps::Op::SEND_F: case ps::Op::SEND_B: return "send_s";
    case ps::Op::RECV_F: case ps::Op::RECV_B: return "recv_s";
    default: return nullptr;
  }
}

Collected collect(const std::vector<KinetoRun>& runs, int S) {
  Collected c;
  c.series.resize(S);
  c.first_forward.resize(S), c.other.resize(S), c.any_flight.resize(S), c.valid_flights.assign(S, 0);
  for (const auto& run : runs) {
    const double n = run.samples_per_microbatch > 0 ? run.samples_per_microbatch : 1;
    for (const auto& step : run.steps) {
      std::vector<double> step_other(S, 0.0);
      for (const auto& rank : step) {
        for (const auto& a : rank) {
          const int s = a.action.stage.value;
          if (s < 0 || s >= S) continue;
          if (a.other) {
            step_other[s] += a.cost;
            continue;
          }
          if (a.action.op == ps::Op::F && (!a.action.microbatch || a.action.microbatch->value == 0)) {
            c.first_forward[s].emplace_back(n, a.cost);
          }
          if (const char* field = field_of(a.action)) c.series[s][field].emplace_back(n, a.cost);
          if (a.arrival < 0) continue;
          const bool fwd = a.action.op == ps::Op::F || a.action.op == ps::Op::SEND_F;
          const int cut = fwd ? s : s - 1;  // the cut after stage `cut`
          if (cut < 0 || cut + 1 >= S) continue;
          const double flight = std::max(0.0, a.arrival - a.end);
          c.any_flight[cut].emplace_back(n, flight);
          if (a.valid_flight) c.series[cut]["output_transfer_s"].emplace_back(n, flight), ++c.valid_flights[cut];
        }
      }
      for (int s = 0; s < S; ++s) c.other[s].emplace_back(n, step_other[s]);
    }
  }
  return c;
}

void check_runs(const std::vector<KinetoRun>& runs) {
  const auto& first = runs.front();
  for (const auto& run : runs) {
    if (run.program.num_stages() != first.program.num_stages()) {
      throw Error(run.path + ": " + std::to_string(run.program.num_stages()) + " stages, but " + first.path + " has " +
                  std::to_string(first.program.num_stages()) +
                  ": the runs fitted together must split the model into the same stages");
    }
    if ((run.samples_per_microbatch > 0) != (first.samples_per_microbatch > 0)) {
      throw Error(run.path + ": its micro-batch size is known for some runs and not others");
    }
    if (run.samples_per_microbatch == 0 && run.program.num_microbatches != first.program.num_microbatches) {
      throw Error(run.path + ": M=" + std::to_string(run.program.num_microbatches) + " but " + first.path + " has M=" +
                  std::to_string(first.program.num_microbatches) + ": give the step's batch (calibrate --batch) so " +
                  "that each run's micro-batch size is known");
    }
  }
}

// One stage's row: its compute, then its transfers.
class StageFit {
 public:
  StageFit(Collected& c, int s, int stages, double ref, KinetoFit& fit)
      : c_(c), x_(c.series[s]), s_(s), stages_(stages), ref_(ref), fit_(fit), stage_("stage " + std::to_string(s)) {}

  models::StageCostRow row() {
    compute();
    transfers();
    if (!scaled_like_forward_.empty()) {
      std::string names;
      for (const auto& n : scaled_like_forward_) names += (names.empty() ? "" : ", ") + n;
      fit_.notes.push_back(stage_ + ": " + names + " timed at one micro-batch size: scaled to others as its forward is");
    }
    return r_;
  }

 private:
  bool set(const std::string& name, double& value) {
    const auto it = x_.find(name);
    if (it == x_.end() || it->second.empty()) return false;
    const Line l = fit_series(it->second, ref_);
    value = l.at_ref;
    if (l.per_sample) r_.per_sample_s[name] = *l.per_sample;
    return true;
  }

  // A backward timed at one size only scales as the forward does (the same
  // shapes, about twice the work): its line is the forward's, times their
  // ratio at that size.
  bool set_like_forward(const std::string& name, double& value) {
    if (!set(name, value)) return false;
    const auto f = r_.per_sample_s.find("forward_s");
    if (r_.per_sample_s.count(name) || f == r_.per_sample_s.end()) return true;
    const double n0 = x_[name].front().first;
    const double f_fixed = r_.forward_s - f->second * ref_, f_at_n0 = f_fixed + f->second * n0;
    if (f_at_n0 <= 0) return true;
    const double k = value / f_at_n0;
    r_.per_sample_s[name] = k * f->second;
    value = k * (f_fixed + f->second * ref_);
    scaled_like_forward_.push_back(name);
    return true;
  }

  void compute() {
    const std::string& source = fit_.table.source;
    if (!set("forward_s", r_.forward_s)) {
      if (c_.first_forward[s_].empty()) throw Error(source + ": no run timed a forward of " + stage_);
      x_["forward_s"] = c_.first_forward[s_];  // M = 1: every forward is a step's first
      set("forward_s", r_.forward_s);
    } else if (!c_.first_forward[s_].empty()) {
      r_.first_forward_extra_s = std::max(0.0, fit_series(c_.first_forward[s_], ref_).at_ref - r_.forward_s);
    }
    auto& n = fit_.samples[s_];
    n.forwards = static_cast<int>(x_["forward_s"].size() + (r_.first_forward_extra_s > 0 ? c_.first_forward[s_].size() : 0));
    r_.split = x_.count("input_grad_s") && x_.count("weight_grad_s");
    if (r_.split) {
      set_like_forward("input_grad_s", r_.input_grad_s);
      set_like_forward("weight_grad_s", r_.weight_grad_s);
    }
    if (!set_like_forward("backward_s", r_.backward_s)) {
      if (!r_.split) throw Error(source + ": no run timed a backward of " + stage_ + " (B, or both I and W)");
      r_.backward_s = r_.input_grad_s + r_.weight_grad_s;
      if (r_.per_sample_s.count("input_grad_s") || r_.per_sample_s.count("weight_grad_s")) {
        r_.per_sample_s["backward_s"] = r_.per_sample_s["input_grad_s"] + r_.per_sample_s["weight_grad_s"];
      }
      fit_.notes.push_back(stage_ + ": no run ran a full backward; B is taken as I + W");
    }
    r_.recompute_s = r_.forward_s;
    if (r_.per_sample_s.count("forward_s")) r_.per_sample_s["recompute_s"] = r_.per_sample_s["forward_s"];
    r_.step_s = fit_series(c_.other[s_], ref_).at_ref;  // per step: the size does not enter
    n.backwards = static_cast<int>(x_["backward_s"].size());
    n.input_grads = static_cast<int>(x_["input_grad_s"].size());
    n.weight_grads = static_cast<int>(x_["weight_grad_s"].size());
  }

  void transfers() {
    set("send_s", r_.send_s);
    set("recv_s", r_.recv_s);
    auto& n = fit_.samples[s_];
    n.sends = static_cast<int>(x_["send_s"].size());
    n.receives = static_cast<int>(x_["recv_s"].size());
    if (s_ + 1 >= stages_) return;
    n.flights = c_.valid_flights[s_];
    double flight = 0;
    if (set("output_transfer_s", flight)) {
      r_.output_transfer_s = flight;
    } else if (!c_.any_flight[s_].empty()) {
      double shortest = c_.any_flight[s_].front().second;
      for (const auto& [size, v] : c_.any_flight[s_]) shortest = std::min(shortest, v);
      r_.output_transfer_s = shortest;
      fit_.notes.push_back("cut after " + stage_ + ": no receiver was waiting before its message was sent, so no " +
                           "flight was seen whole; the shortest send-to-arrival, an upper bound, is used");
    } else {
      r_.output_transfer_s = 0;  // the two stages share a rank: the message is a local copy
    }
  }

  Collected& c_;
  std::map<std::string, Series>& x_;
  const int s_, stages_;
  const double ref_;
  KinetoFit& fit_;
  const std::string stage_;
  models::StageCostRow r_;
  std::vector<std::string> scaled_like_forward_;
};

}  // namespace

KinetoFit fit_kineto(const std::vector<KinetoRun>& runs) {
  if (runs.empty()) throw Error("no torch.profiler runs to fit");
  check_runs(runs);
  const auto& first = runs.front();
  const int S = first.program.num_stages();
  Collected c = collect(runs, S);
  KinetoFit fit;
  auto& table = fit.table;
  table.source = runs.size() == 1 ? first.path : first.path + " and " + std::to_string(runs.size() - 1) + " more";
  const double ref = first.samples_per_microbatch > 0 ? first.samples_per_microbatch : 1;
  table.samples_per_microbatch = ref;
  fit.samples.resize(S);
  for (int s = 0; s < S; ++s) table.stages.push_back(StageFit(c, s, S, ref, fit).row());
  std::map<double, int> sizes;
  for (const auto& run : runs) ++sizes[run.samples_per_microbatch];
  if (sizes.size() == 1) {
    fit.notes.push_back(first.samples_per_microbatch > 0
                            ? "every run has micro-batches of " + models::yaml_number(ref) +
                                  " samples: the table times that size only (fit runs of two sizes to time others)"
                            : "the runs' batch is not known (calibrate --batch): the table times their micro-batch only");
  }
  return fit;
}

}  // namespace pipetwin::calibration
