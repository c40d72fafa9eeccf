// The report part of fit(): the residuals of every observation against the
// calibrated StageCostModel, the notes on coefficients that were not fitted,
// and the calibration section of the output file.
#include "calibration/fit_parts.hpp"

#include <algorithm>
#include <cmath>

#include "models/stage_costs.hpp"
#include "models/yaml_file.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

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

namespace fitting {

namespace {

// Where one run's residuals go: its op kind's and the overall stats, or, for
// a run with more ranks than cores fitted apart, the compute's and the
// step's (the compute's against the curves lengthened by oversubscribed_compute) to
// shared_core_residuals.
struct Residuals {
  FitResult& result;
  bool apart = false;
  void add(const std::string& op, double predicted, double measured) {
    if (apart) {
      if (op != "send" && op != "transfer" && op != "receive") {
        const auto& t = result.hardware.topology;  // as stage_table
        const double slower = op == "step" ? 0 : t.oversubscribed_compute;
        const double action = op == "step" || !(predicted > 0) ? 0 : t.oversubscribed_action_s;
        result.shared_core_residuals[op].add(predicted * (1 + slower) + action, measured);
      }
      return;
    }
    result.residuals[op].add(predicted, measured);
    result.overall.add(predicted, measured);
    ++result.observations;
  }
};

void compute_residuals(const TraceRun& run, const Observations& as_measured, double cold_s_per_byte, Residuals& into) {
  const pm::StageCostModel costs(run.model, into.result.hardware, request_of(run));
  for (const auto& g : as_measured.compute) {
    if (g.run != &run) continue;
    const auto [i, j] = run.program.partition.at(g.stage);
    double predicted = 0;
    switch (g.pass) {
      case pm::Pass::Forward: predicted = costs.forward_s(i, j, g.stage); break;
      case pm::Pass::ForwardNoGrad: predicted = costs.forward_nograd_s(i, j, g.stage); break;
      case pm::Pass::Recompute: predicted = costs.recompute_s(i, j, g.stage); break;
      case pm::Pass::Backward:  // I + W of a zero-bubble stage: one more action's overhead
        predicted = g.actions == 2 ? costs.input_grad_s(i, j, g.stage) + costs.weight_grad_s(i, j, g.stage)
                                   : costs.backward_s(i, j, g.stage);
        break;
    }
    predicted += cold_s_per_byte * g.cold_bytes;
    into.add(std::string(pm::pass_name(g.pass)), predicted, g.measured);
  }
  // A zero-bubble stage's two halves, each against its own prediction.
  for (const auto& g : as_measured.split) {
    if (g.run != &run) continue;
    const auto [i, j] = run.program.partition.at(g.stage);
    into.add("input_grad", costs.input_grad_s(i, j, g.stage), g.input_grad_s);
    into.add("weight_grad", costs.weight_grad_s(i, j, g.stage), g.weight_grad_s);
  }
  for (const auto& g : as_measured.steps) {
    if (g.run != &run) continue;
    const auto [i, j] = run.program.partition.at(g.stage);
    into.add("step", costs.step_s(i, j, g.stage), g.measured);
  }
}

void link_residuals(const TraceRun& run, const std::vector<LinkGroup>& links, Residuals& into) {
  const pm::Hardware& hw = into.result.hardware;
  for (const auto& g : links) {
    if (g.run != &run) continue;
    into.add("send", hw.device.transfer_overhead_s + (hw.device.send_bandwidth > 0 ? g.bytes / hw.device.send_bandwidth : 0),
             g.send);
    const int to = g.forward ? g.stage + 1 : g.stage - 1;
    const double take = hw.device.recv_seconds(g.bytes);
    if (g.waited > 0) {
      into.add("transfer", hw.topology.path(run.program.rank_of(ps::StageId{g.stage}).value,
                                            run.program.rank_of(ps::StageId{to}).value).seconds(g.bytes),
               g.flight);
    }
    if (g.arrived > 0) into.add("receive", take, g.take);
  }
}

}  // namespace

void add_residuals(const Inputs& in, const Observations& as_measured, const std::vector<LinkGroup>& links,
                   double cold_s_per_byte, FitResult& result) {
  for (const auto& run : in.runs) {
    Residuals into{result, in.shared(run) && !in.all_shared};
    compute_residuals(run, as_measured, cold_s_per_byte, into);
    link_residuals(run, links, into);
  }
  for (auto& [_, r] : result.residuals) r.finish();
  for (auto& [_, r] : result.shared_core_residuals) r.finish();
  result.overall.finish();
}

void note_not_fitted(FitResult& result) {
  for (const auto& c : result.coefficients) {
    // The weights' streaming is fixed at 0 wherever every layer of a kind has
    // the same weights (a Transformer's blocks): the usual case, not noted.
    const bool usual = c.name.rfind("weights.", 0) == 0 && c.how.rfind("fixed to 0", 0) == 0;
    if (c.how != "fitted" && c.how.rfind("median", 0) != 0 && !usual) result.notes.push_back(c.name + ": " + c.how);
  }
}

}  // namespace fitting

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
    out += "      partition: [" + fitting::partition_text(r.program.partition, ", ") + "]\n";
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
