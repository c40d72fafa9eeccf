// StageCostModel's per-layer tables: each pass's time on a rank's device
// (time_layers) and each layer's memory on a device of a tensor group
// (size_layers), the prefix sums every stage's costs are read from.
#include <algorithm>

#include "models/stage_costs.hpp"

namespace pipetwin::models {

namespace {

// One layer's memory on one device of a tensor group of T, per sample:
// parameters, stashed elements, what a deferred weight gradient keeps, and
// the bytes its backward holds at once beyond the stash.
struct LayerMemory {
  double params = 0, stashed = 0, weight_grad_stash = 0, workspace = 0;
};
LayerMemory layer_memory(const LayerCost& c, Precision precision, int T, bool sequence_parallel, bool selective, bool by_op) {
  LayerMemory out;
  const double bytes = bytes_per_element(precision);
  // Selective recompute: the core's scores are back while the backward runs.
  out.workspace = (c.backward_workspace_bytes + (selective ? static_cast<double>(c.selective_elems) * bytes : 0)) /
                  (c.tensor_split ? T : 1);
  const double whole_params = static_cast<double>(c.tp_replicated_params);
  out.params = (static_cast<double>(c.params) - whole_params) / T + whole_params;
  // Sequence parallelism splits all of it; without, the norms and dropouts stay whole.
  const double whole = sequence_parallel ? 0 : static_cast<double>(c.tp_replicated_elems);
  const double freed = selective ? static_cast<double>(c.selective_elems) : 0;
  out.stashed = whole + (static_cast<double>(c.stashed_elems) - freed - whole) / T;
  if (by_op && c.op_saved_elems > 0) {
    // The op policy keeps its saved outputs; the rest of the layer's stash
    // is back, one layer at a time, while its backward runs.
    const double always = static_cast<double>(c.op_saved_whole_elems);
    const double replicated = static_cast<double>(c.op_saved_replicated_elems);
    const double saved = always + (sequence_parallel ? replicated / T : replicated) +
                         (static_cast<double>(c.op_saved_elems) - always - replicated) / T;
    out.workspace += std::max(0.0, out.stashed - saved) * bytes;
    out.stashed = saved;
  }
  // Whole with sequence parallelism too: the executor keeps the gathered input.
  const double w_whole = static_cast<double>(c.weight_grad_replicated_elems);
  out.weight_grad_stash = w_whole + (static_cast<double>(c.weight_grad_elems) - w_whole) / T;
  return out;
}

// A layer's FLOPs per sample as time at the BF16 rate: under FP8 its
// products with weights at the FP8 rate (Device::fp8_flops_equivalent); the
// attention core of selective recompute is never one of them.
struct LayerWork {
  double forward = 0, input_grad = 0, weight_grad = 0, op_recompute = 0;
};
// A mixture's busiest expert device adds `extra` (its load beyond the mean)
// of the routed experts' products, FP8 products like the others.
LayerWork layer_work(const LayerCost& c, const Device& d, bool fp8, double extra) {
  const double more = c.expert_flops * extra;
  const auto eq = [&](double flops, double products) {
    return fp8 ? d.fp8_flops_equivalent(flops + more, products + more) : flops + more;
  };
  return {eq(c.forward_flops, c.fp8_flops), eq(c.input_grad_flops, c.fp8_flops), eq(c.weight_grad_flops, c.fp8_flops),
          fp8 ? d.fp8_flops_equivalent(c.op_recompute_flops, c.fp8_op_recompute_flops) : c.op_recompute_flops};
}

}  // namespace

double StageCostModel::pass_weights(int l) const {
  const auto& c = model_.layers[l].cost;
  const double others = static_cast<double>(c.expert_params) * bytes_per_element(model_.precision) * (1 - 1.0 / expert_);
  return (pass_weight_bytes(model_, l) - others) / (c.tensor_split ? tensor_parallel_ : 1);
}

void StageCostModel::time_layers(int k, double b) {
  const Device& d = devices_[k];
  const Model& m = model_;
  const int T = tensor_parallel_, n = static_cast<int>(m.layers.size());
  const bool fp8 = m.precision == Precision::FP8;
  for (int l = 0; l < n; ++l) {
    const auto& c = m.layers[l].cost;
    const std::string_view kind = kind_name(m.layers[l].kind);
    const int ops = operators(m, l);  // for a per-operator (pooled) curve
    const double share = b / T;  // a device's share of a tensor group's matrices, at their smaller efficiency
    const LayerWork work = layer_work(c, d, fp8, expert_extra(l));
    const std::pair<double, double> fused = fused_core_s(k, l);
    const double core_f = fused.first, core_b = fused.second;
    const double core = core_f > 0 ? c.selective_flops : 0;  // a fused core's FLOPs leave the curve (twice in I)
    const double f = (work.forward - core) * share;
    const double weights = pass_weights(l);
    double in = 0, w = 0;
    if (d.has_kind(kind)) {
      // A calibrated kind times the layer's whole backward on its curve,
      // shared between I and W in proportion to their work.
      const double bwd = (work.input_grad + work.weight_grad) * share;
      const double t = d.layer_seconds(kind, Pass::Backward, bwd, m.precision, ops) +
                       (bwd > 0 ? d.weight_stream_seconds(Pass::Backward, weights) : 0);
      // Shared as measured where a calibration saw I and W apart, else by FLOPs.
      const auto* curves = d.kind_curves(kind);
      const double w_share = c.weight_grad_flops <= 0       ? 0
                             : curves->weight_grad_share ? *curves->weight_grad_share
                                                         : (bwd > 0 ? work.weight_grad * share / bwd : 0);
      in = bwd > 0 ? t * (1 - w_share) : 0;
      w = bwd > 0 ? t - in : 0;
    } else {
      in = d.compute_seconds((work.input_grad - 2 * core) * share, m.precision) + core_b;
      w = d.compute_seconds(work.weight_grad * share, m.precision);
    }
    // The weights' floor: F and I read each weight once, W reads and writes each (accumulated).
    const double read = d.weight_seconds(weights);
    // A calibrated kind's layer streams its weights in each pass (Device::weight_stream).
    const auto pass_seconds = [&](Pass pass) {
      const double t = d.layer_seconds(kind, pass, f, m.precision, ops);
      return f > 0 && d.has_kind(kind) ? t + d.weight_stream_seconds(pass, weights) : t;
    };
    if (c.input_grad_flops > 0) in = std::max(in, read);
    if (c.weight_grad_flops > 0) w = std::max(w, 2 * read);
    const auto floored = [&](Pass p) { return std::max(pass_seconds(p), c.forward_flops > 0 ? read : 0.0) + core_f; };
    const auto [fwd_cp, bwd_cp] = context_exchange_s(k, l, fused);  // context parallelism's keys and values
    const double a2a = 2 * expert_exchange_s(k, l);  // a mixture's dispatch and combine, each way
    const double fwd_comm = tp_forward_[l + 1] - tp_forward_[l] + fwd_cp + a2a, bwd_comm = tp_backward_[l + 1] - tp_backward_[l] + bwd_cp + a2a;
    // Elementwise traffic (with FP8's casts): the replicated part whole on
    // each device unless sequence parallelism splits it, the rest split.
    const double whole_share = sequence_parallel_ ? share : b, cast = fp8 ? 1 : 0;
    const auto traffic = [&](double total, double replicated) {
      return d.traffic_seconds(kind, replicated * whole_share + (total - replicated) * share);
    };
    const double fwd_mem = traffic(c.forward_traffic + cast * c.fp8_forward_traffic,
                                   c.forward_traffic_replicated + cast * c.fp8_forward_traffic_replicated);
    const double bwd_mem = traffic(c.backward_traffic + cast * c.fp8_backward_traffic,
                                   c.backward_traffic_replicated + cast * c.fp8_backward_traffic_replicated);
    forward_[k][l + 1] = forward_[k][l] + floored(Pass::Forward) + fwd_comm + fwd_mem;
    forward_nograd_[k][l + 1] = forward_nograd_[k][l] + floored(Pass::ForwardNoGrad) + fwd_comm + fwd_mem;
    recompute_[k][l + 1] = recompute_[k][l] + floored(Pass::Recompute) + fwd_comm + fwd_mem;
    // Selective recompute re-runs the attention core inside the backward: its
    // share of the layer's recompute, and its traffic. The op policy re-runs
    // its block's forward but the saved products and attention kernel: their
    // share, all its elementwise traffic, and its collectives (with sequence
    // parallelism only the all-gathers: the reduce-scatters' outputs are saved).
    const auto recompute_share = [&](double flops) {
      return work.forward - core > 0 ? pass_seconds(Pass::Recompute) * flops / (work.forward - core) : 0;
    };
    double selective = 0;
    const bool by_op = checkpoint_.by_op(), picked = recompute_policy_ == schedule::RecomputePolicy::Selective;
    if (picked && by_op && c.op_saved_elems > 0) {
      selective = recompute_share(work.op_recompute) + fwd_mem + (sequence_parallel_ ? fwd_comm / 2 : fwd_comm);
    } else if (picked && !by_op && c.selective_flops > 0) {
      selective = (core_f > 0 ? core_f : recompute_share(c.selective_flops)) + traffic(c.selective_traffic, 0);
    }
    input_grad_[k][l + 1] = input_grad_[k][l] + in + bwd_comm + bwd_mem + selective;
    weight_grad_[k][l + 1] = weight_grad_[k][l] + w;
    a2a_[k][l + 1] = a2a_[k][l] + a2a;
  }
}

void StageCostModel::size_layers() {
  const Model& m = model_;
  const int n = static_cast<int>(m.layers.size()), T = tensor_parallel_;
  for (auto* prefix : {&params_, &stashed_, &weight_grad_stash_, &zero_params_, &comm_params_}) prefix->assign(n + 1, 0);
  // A mixture's experts over an expert group of E: each device holds 1/E;
  // ZeRO shards them over the shard group's members outside the expert
  // group (G / E of them where E divides G, else none); their gradients are
  // reduced over D / E replicas (comm_params_'s ring ratio, stage_costs.hpp).
  const double E = expert_, G = shard_, D = data_parallel_;
  const double zero_kept = std::min(1.0, G / E);
  const double ring = D > 1 ? ((D / E - 1) / (D / E)) / ((D - 1) / D) : 1;
  workspace_.assign(n, 0);
  const bool by_op = recompute_policy_ == schedule::RecomputePolicy::Selective && checkpoint_.by_op();
  const bool selective = recompute_policy_ == schedule::RecomputePolicy::Selective && !by_op;
  for (int l = 0; l < n; ++l) {
    const LayerMemory lm = layer_memory(m.layers[l].cost, m.precision, T, sequence_parallel_, selective, by_op);
    const auto& c = m.layers[l].cost;
    const double experts = static_cast<double>(c.expert_params) / (c.tensor_split ? T : 1);
    params_[l + 1] = params_[l] + lm.params - experts * (1 - 1 / E);
    zero_params_[l + 1] = zero_params_[l] + lm.params - experts * (1 - zero_kept);
    comm_params_[l + 1] = comm_params_[l] + lm.params - experts * (1 - ring / E);
    // The busiest expert device stashes its load's share of the routed tokens.
    const double extra = static_cast<double>(c.expert_stashed_elems) * expert_extra(l) / T;
    stashed_[l + 1] = stashed_[l] + lm.stashed + extra;
    weight_grad_stash_[l + 1] = weight_grad_stash_[l] + lm.weight_grad_stash;
    workspace_[l] = lm.workspace;
  }
}

}  // namespace pipetwin::models
