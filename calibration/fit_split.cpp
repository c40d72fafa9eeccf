// fit_weight_grad_share: W's share of the backward, per layer kind, from the
// stages whose backward a zero-bubble schedule ran as I and W apart.
//
// The simulator times a calibrated kind's backward on its curve and splits
// it between I and W; by their FLOPs, W is about half of a matrix product's
// backward, but a weight gradient reads the stashed input again and
// accumulates into the gradient, and on a CPU it ran far slower than its
// FLOPs say. Here, for each such stage, W less its action's overhead is
// sum over the stage's kinds of share_k x (the kind's layers' backward
// seconds on the fitted curve, scaled so that the kinds' sum is the
// measured I + W less two overheads), and the shares are its least squares
// (bounded to [0, 1)). The scaling makes it a split of what was measured:
// every action counts, also those that ran beside another rank's and were
// slowed with it. A kind none of these stages holds keeps the FLOPs' split.
#include <algorithm>
#include <map>

#include "calibration/fit_parts.hpp"

namespace pipetwin::calibration::fitting {
namespace pm = pipetwin::models;

void fit_weight_grad_share(const std::vector<Observations::SplitBackward>& split, pm::Device& device, FitResult& result) {
  if (split.empty()) return;
  // Each stage's backward seconds per kind, on the fitted curves.
  std::vector<std::map<std::string, double>> seconds;
  std::map<std::string, int> column;
  for (const auto& g : split) {
    const TraceRun& run = *g.run;
    const auto [i, j] = run.program.partition.at(g.stage);
    const int T = run.program.tensor_parallel;
    std::map<std::string, double> by_kind;
    for (int l = i; l < j; ++l) {
      const pm::Layer& layer = run.model.layers.at(l);
      if (layer.cost.weight_grad_flops <= 0) continue;  // all of it is I
      const std::string kind(pm::kind_name(layer.kind));
      const double flops = pass_flops(layer, pm::Pass::Backward) * run.microbatch_size / (layer.cost.tensor_split ? T : 1);
      by_kind[kind] += device.layer_seconds(kind, pm::Pass::Backward, flops, run.model.precision, pm::operators(run.model, l));
      column.emplace(kind, 0);
    }
    seconds.push_back(by_kind);
  }
  Problem p;
  int c = 0;
  for (auto& [kind, index] : column) {
    index = c++;
    Param share = non_negative(kind + ".weight_grad_share", "no stage tells it apart from the other kinds'");
    p.params.push_back(share);
  }
  const double overhead = device.action_overhead.backward_s;
  for (std::size_t n = 0; n < split.size(); ++n) {
    double predicted = 0;
    for (const auto& [kind, s] : seconds[n]) predicted += s;
    const double measured = split[n].input_grad_s + split[n].weight_grad_s - 2 * overhead;
    const double scale = predicted > 0 && measured > 0 ? measured / predicted : 1;
    std::vector<double> row(column.size(), 0.0);
    for (const auto& [kind, s] : seconds[n]) row[column.at(kind)] = s * scale;
    p.x.push_back(row);
    p.y.push_back(std::max(0.0, split[n].weight_grad_s - overhead));
  }
  const Solution sol = robust_solve(p);
  record(result.coefficients, p, sol);
  for (const auto& [kind, index] : column) {
    if (sol.how[index].rfind("fitted", 0) != 0) {
      result.notes.push_back(kind + ": W's share of the backward not fitted (" + sol.how[index] + "): split by FLOPs");
      continue;
    }
    auto it = device.kinds.find(kind);
    if (it == device.kinds.end()) {
      result.notes.push_back(kind + ": I and W ran apart, but the kind has no curve of its own: split by FLOPs");
      continue;
    }
    it->second.weight_grad_share = std::min(0.95, sol.value[index]);
  }
}

}  // namespace pipetwin::calibration::fitting
