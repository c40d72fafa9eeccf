// Stage cost model and the dynamic programs of partition.hpp.
#include "models/partition.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>

#include "models/layer_graph.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/memory.hpp"

namespace pipetwin::models {

Optimizer parse_optimizer(std::string_view name) {
  if (name == "sgd") return Optimizer::SGD;
  if (name == "momentum") return Optimizer::Momentum;
  if (name == "adam") return Optimizer::Adam;
  throw Error("unknown optimizer '" + std::string(name) + "' (valid: sgd, momentum, adam)");
}

std::string_view method_name(Method m) {
  switch (m) {
    case Method::Optimal: return "optimal";
    case Method::Uniform: return "uniform";
    case Method::Parameters: return "parameters";
  }
  return "?";
}

Method parse_method(std::string_view name) {
  if (name == "optimal" || name == "auto") return Method::Optimal;
  if (name == "uniform") return Method::Uniform;
  if (name == "parameters") return Method::Parameters;
  throw Error("unknown partition method '" + std::string(name) + "' (valid: optimal, uniform, parameters)");
}

std::vector<schedule::LayerRange> Partition::ranges() const {
  std::vector<schedule::LayerRange> out;
  for (const auto& s : stages) out.push_back(s.layers);
  return out;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Everything the cost of "stage s holds layers [i, j)" needs, as prefix sums.
class CostModel {
 public:
  CostModel(const Model& m, const Hardware& hw, const PartitionRequest& r) : m_(m), hw_(hw), r_(r) {
    const int n = static_cast<int>(m.layers.size()), S = r.stages();
    devices_ = r.devices.empty() ? std::vector<Device>(r.ranks, hw.device) : r.devices;
    if (static_cast<int>(devices_.size()) != r.ranks) {
      throw Error("partition: " + std::to_string(devices_.size()) + " devices given for " + std::to_string(r.ranks) + " ranks");
    }
    const double b = r.microbatch_size;
    compute_.assign(r.ranks, std::vector<double>(n + 1, 0));
    for (int k = 0; k < r.ranks; ++k) {
      for (int l = 0; l < n; ++l) {
        const auto& c = m.layers[l].cost;
        const Device& d = devices_[k];
        double t = d.compute_seconds(c.forward_flops * b, m.precision) +
                   d.compute_seconds(c.input_grad_flops * b, m.precision) +
                   d.compute_seconds(c.weight_grad_flops * b, m.precision);
        recompute_layer_.push_back(d.compute_seconds(c.forward_flops * b, m.precision));
        compute_[k][l + 1] = compute_[k][l] + t;
      }
    }
    params_.assign(n + 1, 0);
    stash_.assign(n + 1, 0);
    forward_.assign(r.ranks, std::vector<double>(n + 1, 0));
    for (int l = 0; l < n; ++l) {
      params_[l + 1] = params_[l] + static_cast<double>(m.layers[l].cost.params);
      stash_[l + 1] = stash_[l] + static_cast<double>(m.layers[l].cost.stashed_elems);
      for (int k = 0; k < r.ranks; ++k) {
        forward_[k][l + 1] = forward_[k][l] + recompute_layer_[k * n + l];
      }
    }
    cut_ = m.cut_elems();
    // How many micro-batches each stage stashes under this schedule (the IR's accounting).
    const auto program = schedule::build_schedule(r.schedule, {r.ranks, r.microbatches, r.virtual_stages, r.recompute});
    memory_ = schedule::account_memory(program);
    (void)S;
  }

  int rank_of(int stage) const { return stage % r_.ranks; }
  double bytes() const { return bytes_per_element(m_.precision); }
  double cut_bytes(int p) const { return static_cast<double>(cut_[p]) * bytes() * r_.microbatch_size; }
  std::int64_t params(int i, int j) const { return static_cast<std::int64_t>(params_[j] - params_[i]); }

  double compute(int i, int j, int s) const {
    const int k = rank_of(s);
    double t = compute_[k][j] - compute_[k][i];
    if (r_.recompute != schedule::RecomputePolicy::None) t += forward_[k][j] - forward_[k][i];
    return t;
  }

  double transfer(int i, int j, int s) const {
    const int S = r_.stages(), n = static_cast<int>(m_.layers.size());
    double t = 0;
    const auto hop = [&](int a, int b, double bytes) {
      const Link l = hw_.topology.path(rank_of(a), rank_of(b));
      const double overhead = devices_[rank_of(a)].transfer_overhead_s;
      return 2 * (overhead + l.seconds(bytes));  // activations forward, gradients backward
    };
    if (i > 0 && s > 0 && rank_of(s - 1) != rank_of(s)) t += hop(s - 1, s, cut_bytes(i));
    if (j < n && s + 1 < S && rank_of(s + 1) != rank_of(s)) t += hop(s, s + 1, cut_bytes(j));
    return t;
  }

  double time(int i, int j, int s) const { return compute(i, j, s) + transfer(i, j, s); }

  // Weights (+ an fp32 master copy in half precision) per version, gradients,
  // optimizer state, whole stashed micro-batches and, when recomputing, stage inputs.
  double memory(int i, int j, int s) const {
    const double p = params_[j] - params_[i];
    const auto& st = memory_[s];
    const double master = m_.precision == Precision::FP32 ? 0 : 4;
    const double states = r_.optimizer == Optimizer::Adam ? 2 : r_.optimizer == Optimizer::Momentum ? 1 : 0;
    const double weights = p * (bytes() * st.weight_versions + bytes() + master + 4 * states);
    const double act = (stash_[j] - stash_[i]) * bytes() * r_.microbatch_size;
    return weights + st.peak_activations * act + st.peak_inputs * cut_bytes(i);
  }

  double capacity(int s) const { return devices_[rank_of(s)].memory_bytes; }

 private:
  const Model& m_;
  const Hardware& hw_;
  const PartitionRequest& r_;
  std::vector<Device> devices_;
  std::vector<std::vector<double>> compute_, forward_;
  std::vector<double> recompute_layer_, params_, stash_;
  std::vector<std::int64_t> cut_;
  std::vector<schedule::StageMemory> memory_;
};

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
  const CostModel cost(model, hardware, request);
  Partition p;
  p.method = method;
  double total = 0;
  for (int s = 0; s < static_cast<int>(ranges.size()); ++s) {
    const auto [i, j] = ranges[s];
    StagePlan st;
    st.layers = ranges[s];
    st.compute_s = cost.compute(i, j, s);
    st.transfer_s = cost.transfer(i, j, s);
    st.time_s = st.compute_s + st.transfer_s;
    st.memory_bytes = cost.memory(i, j, s);
    st.capacity_bytes = cost.capacity(s);
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

Partition partition_model(const Model& input, const Hardware& hw, const PartitionRequest& r, Method method) {
  const Model model = in_topological_order(input);
  const int n = static_cast<int>(model.layers.size()), S = r.stages();
  if (r.ranks < 1 || r.virtual_stages < 1 || r.microbatches < 1 || r.microbatch_size < 1) {
    throw Error("partition: ranks, virtual stages, micro-batches and micro-batch size must be at least 1");
  }
  if (S > n) {
    throw Error("partition: cannot cut " + model.name + " (" + std::to_string(n) + " layers) into " + std::to_string(S) +
                " stages: a stage needs at least one layer");
  }
  const CostModel cost(model, hw, r);
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
          n, S, [&](int i, int j, int s) { return cost.memory(i, j, s) <= cost.capacity(s) ? cost.time(i, j, s) : kInf; },
          &value);
      if (ranges.empty()) {
        // Nothing fits: find the split with the smallest worst overflow and name that stage.
        const auto spread = min_max_split(
            n, S, [&](int i, int j, int s) { return cost.memory(i, j, s) - cost.capacity(s); }, &value);
        int worst = 0;
        double over = -kInf;
        for (int s = 0; s < S; ++s) {
          const double o = cost.memory(spread[s].begin, spread[s].end, s) - cost.capacity(s);
          if (o > over) over = o, worst = s;
        }
        const auto [i, j] = spread[worst];
        throw Error("partition: no split of " + model.name + " into " + std::to_string(S) + " stages fits in memory (" +
                    r.schedule + ", M=" + std::to_string(r.microbatches) + ", micro-batch " +
                    std::to_string(r.microbatch_size) + "): at best stage " + std::to_string(worst) + " (layers " +
                    std::to_string(i) + ".." + std::to_string(j - 1) + ") needs " + gb(cost.memory(i, j, worst)) +
                    " of " + gb(cost.capacity(worst)) + ", over by " + gb(over) +
                    "; try more stages, recompute, fewer micro-batches in flight or smaller micro-batches");
      }
      break;
  }
  return evaluate_partition(model, hw, r, ranges, method);
}

}  // namespace pipetwin::models
