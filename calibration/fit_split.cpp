// fit_weight_grad_share: W's share of the backward, per layer kind, from the
// stages whose backward a zero-bubble schedule ran as I and W apart.
//
// The simulator times a calibrated kind's backward on its curve and splits
// it between I and W; by their FLOPs, W is about half of a matrix product's
// backward, but a weight gradient reads the stashed input again and
// accumulates into the gradient, and on a CPU it ran far slower than its
// FLOPs say. Here, for each such stage, W less its action's overhead is
// share x the measured I + W less two overheads, and the share is the
// robust least squares over the stages (bounded to [0, 0.95]), one for the
// kinds of layers with weights these stages hold: a split of what was
// measured, so that every action counts, also those that ran beside another
// rank's and were slowed with it. A kind none of these stages holds keeps
// the FLOPs' split.
#include <algorithm>
#include <map>

#include "calibration/fit_parts.hpp"

namespace pipetwin::calibration::fitting {
namespace pm = pipetwin::models;

void fit_weight_grad_share(const std::vector<Observations::SplitBackward>& split, pm::Device& device, FitResult& result) {
  if (split.empty()) return;
  // Each stage's backward seconds per kind, on the fitted curves.
  std::vector<std::map<std::string, double>> seconds;
  std::vector<double> all;  // every layer's backward seconds, weights or not
  std::map<std::string, int> column;
  for (const auto& g : split) {
    const TraceRun& run = *g.run;
    const auto [i, j] = run.program.partition.at(g.stage);
    const int T = run.program.tensor_parallel;
    std::map<std::string, double> by_kind;
    double total = 0;
    for (int l = i; l < j; ++l) {
      const pm::Layer& layer = run.model.layers.at(l);
      const std::string kind(pm::kind_name(layer.kind));
      const double flops = pass_flops(layer, pm::Pass::Backward) * run.microbatch_size / (layer.cost.tensor_split ? T : 1);
      const double t = device.layer_seconds(kind, pm::Pass::Backward, flops, run.model.precision, pm::operators(run.model, l));
      total += t;
      if (layer.cost.weight_grad_flops <= 0) continue;  // all of it is I
      by_kind[kind] += t;
      column.emplace(kind, 0);
    }
    seconds.push_back(by_kind);
    all.push_back(total);
  }
  // One share for every kind these stages hold: a pipeline of few stages
  // cannot tell kinds apart (two stage kinds of a two-rank run against three
  // layer kinds), and a weight gradient is the same matrix product whatever
  // the layer around it.
  Problem p;
  p.params.push_back(non_negative("weight_grad_share", "no stage ran its I and W apart"));
  const double overhead = device.action_overhead.backward_s;
  for (std::size_t n = 0; n < split.size(); ++n) {
    double predicted = 0;
    for (const auto& [kind, s] : seconds[n]) predicted += s;
    // Scaled to what was measured (I + W less two overheads): the layers
    // with weights' part of it, whose share W is.
    const double measured = split[n].input_grad_s + split[n].weight_grad_s - 2 * overhead;
    p.x.push_back({all[n] > 0 && measured > 0 ? measured * predicted / all[n] : predicted});
    p.y.push_back(std::max(0.0, split[n].weight_grad_s - overhead));
  }
  const Solution sol = robust_solve(p);
  record(result.coefficients, p, sol);
  if (sol.how[0].rfind("fitted", 0) != 0) {
    result.notes.push_back("W's share of the backward not fitted (" + sol.how[0] + "): split by FLOPs");
    return;
  }
  const double share = std::min(0.95, sol.value[0]);
  for (const auto& [kind, unused] : column) {
    auto it = device.kinds.find(kind);
    if (it == device.kinds.end()) {
      result.notes.push_back(kind + ": I and W ran apart, but the kind has no curve of its own: split by FLOPs");
      continue;
    }
    it->second.weight_grad_share = share;
  }
}

}  // namespace pipetwin::calibration::fitting
