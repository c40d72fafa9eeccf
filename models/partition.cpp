// Stage cost model and the dynamic programs of partition.hpp.
#include "models/partition.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "models/layer_graph.hpp"
#include "models/stage_costs.hpp"
#include "schedule/names.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::models {

namespace {
constexpr schedule::NameTable<Optimizer, 3> kOptimizers{
    "optimizer", {{{Optimizer::SGD, "sgd"}, {Optimizer::Momentum, "momentum"}, {Optimizer::Adam, "adam"}}}};
constexpr schedule::NameTable<Method, 3> kMethods{
    "partition method", {{{Method::Optimal, "optimal"}, {Method::Uniform, "uniform"}, {Method::Parameters, "parameters"}}}};
}  // namespace

Optimizer parse_optimizer(std::string_view name) { return kOptimizers.parse(name); }
std::string_view optimizer_name(Optimizer o) { return kOptimizers.name(o); }
const std::vector<std::string>& optimizer_names() {
  static const auto names = kOptimizers.names();
  return names;
}

std::string_view method_name(Method m) { return kMethods.name(m); }
Method parse_method(std::string_view name) { return kMethods.parse(name == "auto" ? "optimal" : name); }
const std::vector<std::string>& method_names() {
  static const auto names = kMethods.names();
  return names;
}

std::vector<schedule::LayerRange> Partition::ranges() const {
  std::vector<schedule::LayerRange> out;
  for (const auto& s : stages) out.push_back(s.layers);
  return out;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// min over splits of max over stages of cost(i, j, s); infinity where infeasible.
std::vector<schedule::LayerRange> min_max_split(int n, int S, const std::function<double(int, int, int)>& cost,
                                                double* best_value) {
  std::vector<std::vector<double>> best(S, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> from(S, std::vector<int>(n + 1, -1));
  for (int j = 1; j <= n - (S - 1); ++j) best[0][j] = cost(0, j, 0);
  for (int s = 1; s < S; ++s) {
    for (int j = s + 1; j <= n - (S - 1 - s); ++j) {
      for (int i = s; i < j; ++i) {
        if (best[s - 1][i] == kInf) continue;
        const double v = std::max(best[s - 1][i], cost(i, j, s));
        if (v < best[s][j]) {
          best[s][j] = v;
          from[s][j] = i;
        }
      }
    }
  }
  *best_value = best[S - 1][n];
  if (best[S - 1][n] == kInf) return {};
  std::vector<schedule::LayerRange> ranges(S);
  int j = n;
  for (int s = S - 1; s >= 0; --s) {
    const int i = s == 0 ? 0 : from[s][j];
    ranges[s] = {i, j};
    j = i;
  }
  return ranges;
}

std::string gb(double bytes) {
  std::ostringstream out;
  out.precision(3);
  out << bytes / 1e9 << " GB";
  return out.str();
}

}  // namespace

Partition evaluate_partition(const Model& model, const Hardware& hardware, const PartitionRequest& request,
                             const std::vector<schedule::LayerRange>& ranges, Method method) {
  const StageCostModel cost(model, hardware, request);
  Partition p;
  p.method = method;
  double total = 0;
  for (int s = 0; s < static_cast<int>(ranges.size()); ++s) {
    const auto [i, j] = ranges[s];
    StagePlan st;
    st.layers = ranges[s];
    st.compute_s = cost.compute_s(i, j, s);
    st.transfer_s = cost.transfer_s(i, j, s);
    st.time_s = st.compute_s + st.transfer_s;
    st.memory_bytes = cost.memory_bytes(i, j, s);
    st.capacity_bytes = cost.capacity_bytes(s);
    st.params = cost.params(i, j);
    st.cut_in_bytes = i > 0 ? cost.cut_bytes(i) : 0;
    st.cut_out_bytes = j < static_cast<int>(model.layers.size()) ? cost.cut_bytes(j) : 0;
    p.bottleneck_s = std::max(p.bottleneck_s, st.time_s);
    p.fits = p.fits && st.memory_bytes <= st.capacity_bytes;
    total += st.time_s;
    p.stages.push_back(st);
  }
  p.ideal_s = ranges.empty() ? 0 : total / static_cast<double>(ranges.size());
  return p;
}

schedule::Program PartitionRequest::default_program() {
  return schedule::lower(schedule::generate_gpipe({}));
}

void check_stage_count(const Model& model, std::int64_t stages) {
  const auto n = static_cast<std::int64_t>(model.layers.size());
  if (stages > n) {
    throw Error("partition: cannot cut " + model.name + " (" + std::to_string(n) + " layers) into " +
                std::to_string(stages) + " stages: a stage needs at least one layer");
  }
}

Partition partition_model(const Model& input, const Hardware& hw, const PartitionRequest& r, Method method) {
  const Model model = in_topological_order(input);
  const int n = static_cast<int>(model.layers.size()), S = r.stages();
  if (r.ranks() < 1 || r.program.stages_per_rank < 1 || r.microbatches() < 1 || r.microbatch_size < 1) {
    throw Error("partition: ranks, virtual stages, micro-batches and micro-batch size must be at least 1");
  }
  check_stage_count(model, S);
  const StageCostModel cost(model, hw, r);
  std::vector<schedule::LayerRange> ranges;
  double value = 0;
  switch (method) {
    case Method::Uniform:
      for (int s = 0, begin = 0; s < S; ++s) {
        const int size = n / S + (s < n % S ? 1 : 0);
        ranges.push_back({begin, begin + size});
        begin += size;
      }
      break;
    case Method::Parameters:
      ranges = min_max_split(n, S, [&](int i, int j, int) { return static_cast<double>(cost.params(i, j)); }, &value);
      break;
    case Method::Optimal:
      ranges = min_max_split(
          n, S, [&](int i, int j, int s) { return cost.memory_bytes(i, j, s) <= cost.capacity_bytes(s) ? cost.time_s(i, j, s) : kInf; },
          &value);
      if (ranges.empty()) {
        // Nothing fits: find the split with the smallest worst overflow and name that stage.
        const auto spread = min_max_split(
            n, S, [&](int i, int j, int s) { return cost.memory_bytes(i, j, s) - cost.capacity_bytes(s); }, &value);
        int worst = 0;
        double over = -kInf;
        for (int s = 0; s < S; ++s) {
          const double o = cost.memory_bytes(spread[s].begin, spread[s].end, s) - cost.capacity_bytes(s);
          if (o > over) over = o, worst = s;
        }
        const auto [i, j] = spread[worst];
        throw OutOfMemory("partition: no split of " + model.name + " into " + std::to_string(S) + " stages fits in memory (" +
                    r.program.schedule + ", M=" + std::to_string(r.microbatches()) + ", micro-batch " +
                    std::to_string(r.microbatch_size) + "): at best stage " + std::to_string(worst) + " (layers " +
                    std::to_string(i) + ".." + std::to_string(j - 1) + ") needs " + gb(cost.memory_bytes(i, j, worst)) +
                    " of " + gb(cost.capacity_bytes(worst)) + ", over by " + gb(over) +
                    "; try more stages, recompute, fewer micro-batches in flight or smaller micro-batches");
      }
      break;
  }
  return evaluate_partition(model, hw, r, ranges, method);
}

}  // namespace pipetwin::models
