// StageCostModel's collectives: the tensor group's per layer, the data
// group's reduction per stage, and the algorithms and bytes of each.
#include <algorithm>
#include <string>

#include "models/collectives.hpp"
#include "models/stage_costs.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {

// Refuses a model with a layer that T devices cannot split; sums each
// layer's collectives per micro-batch (the same on every rank: the group's link).
void StageCostModel::init_tensor_parallel(double microbatch_size) {
  const int T = tensor_parallel_;
  const int n = static_cast<int>(model_.layers.size());
  if (T > 1) {
    for (const auto& layer : model_.layers) {
      if (!layer.cost.tensor_split) {
        throw Error("tensor parallelism: " + model_.name + "'s layer " + layer.name + " (" + std::string(kind_name(layer.kind)) +
                    ") cannot be split over " + std::to_string(T) +
                    " devices; T > 1 needs a model whose every layer Megatron-LM splits (transformer, llm)");
      }
    }
  }
  tp_forward_.assign(n + 1, 0);
  tp_backward_.assign(n + 1, 0);
  for (int l = 0; l < n; ++l) {
    const auto& c = model_.layers[l].cost;
    const double bytes = static_cast<double>(c.tp_collective_elems) * microbatch_size * bytes_per_element(model_.precision);
    const double one = T > 1 ? tp_allreduce_s(bytes) : 0;
    if (one > 0 && c.tp_forward_collectives + c.tp_backward_collectives > 0) {
      const Collective used = tp_allreduce_algorithm(bytes);
      if (std::find(tp_used_.begin(), tp_used_.end(), used) == tp_used_.end()) tp_used_.push_back(used);
    }
    // Folded experts (ETP 1) take the tokens each device holds: no
    // collective around the MLP, the attention's alone.
    const int folded = fold_experts_ && c.expert_params > 0 ? 1 : 0;
    tp_forward_[l + 1] = tp_forward_[l] + (c.tp_forward_collectives - folded) * one;
    tp_backward_[l + 1] = tp_backward_[l] + (c.tp_backward_collectives - folded) * one;
  }
}

Collective StageCostModel::tp_allreduce_algorithm(double bytes) const {
  // Sequence parallelism's all-gathers and reduce-scatters: rings (the tree only all-reduces).
  if (sequence_parallel_ || tensor_parallel_ <= 1) return Collective::Ring;
  const auto& topo = hardware_.topology;
  if (topo.kind == TopologyKind::SharedHost && (topo.collective.bandwidth > 0 || topo.tensor_collective.bandwidth > 0)) {
    return Collective::Ring;  // Gloo's
  }
  const int T = tensor_parallel_;
  return choose_all_reduce(collective_, topo.group_ring_link(T), group_tree_link(topo, T), bytes, T);
}

double StageCostModel::tp_allreduce_s(double bytes) const {
  const int T = tensor_parallel_;
  if (T <= 1 || bytes <= 0) return 0;
  const auto& topo = hardware_.topology;
  if (tp_allreduce_algorithm(bytes) == Collective::Ring) return topo.ring_all_reduce_seconds(bytes, T);
  const Link edge = group_tree_link(topo, T);
  return tree_all_reduce_seconds(edge, bytes, T, tree_chunks(edge, bytes, T));
}

Collective StageCostModel::reduce_algorithm(int i, int j, int s) const {
  const double bytes = reduce_bytes(i, j) * tensor_parallel_;
  if (data_parallel_ <= 1 || bytes <= 0 || zero_ >= 1) return Collective::Ring;
  // A shared host's calibrated collectives are Gloo's rings (their rounds' work on the cores).
  if (hardware_.topology.kind == TopologyKind::SharedHost && hardware_.topology.collective.bandwidth > 0) {
    return Collective::Ring;
  }
  const Link& link = data_links_.at(rank_of(s));
  return choose_all_reduce(collective_, link, link, bytes, data_parallel_);
}

CollectiveAlgorithm StageCostModel::reduce_collective(int i, int j, int s) const {
  if (zero_ >= 1) return CollectiveAlgorithm::RingReduceScatter;
  return reduce_algorithm(i, j, s) == Collective::Tree ? CollectiveAlgorithm::TreeAllReduce : CollectiveAlgorithm::RingAllReduce;
}

int StageCostModel::reduce_chunks(int i, int j, int s) const {
  if (reduce_collective(i, j, s) != CollectiveAlgorithm::TreeAllReduce) return 1;
  return tree_chunks(data_links_.at(rank_of(s)), reduce_bytes(i, j) * tensor_parallel_, data_parallel_);
}

double StageCostModel::tp_collective_s(int i, int j, int) const {
  double t = tp_forward_[j] - tp_forward_[i] + tp_backward_[j] - tp_backward_[i];
  if (checkpoints()) {
    const auto [a, e] = recomputed_layers(i, j);
    t += tp_forward_[e] - tp_forward_[a];  // the recompute's
  }
  return t;
}

double StageCostModel::reduce_bytes(int i, int j) const {
  return data_parallel_ > 1 ? (comm_params_[j] - comm_params_[i]) * bytes_per_element(model_.gradients()) : 0;
}

double StageCostModel::gather_bytes(int i, int j) const {
  // ZeRO-1 and 2 gather the updated weights after the step; ZeRO-3 before each use instead.
  const bool after_step = zero_ == 1 || zero_ == 2;
  return data_parallel_ > 1 && after_step ? (comm_params_[j] - comm_params_[i]) * bytes_per_element(model_.precision) : 0;
}

double StageCostModel::unshard_bytes(int i, int j) const {
  return keeps_gathered() ? (comm_params_[j] - comm_params_[i]) * bytes_per_element(model_.precision) : 0;
}

double StageCostModel::gathered_weight_bytes(int i, int j, int s) const {
  if (!keeps_gathered()) return 0;
  const double p = params_[j] - params_[i], z = zero_params_[j] - zero_params_[i];
  return (p - z / shard_) * bytes_per_element(model_.precision) * stash_counts_.at(s).weight_versions;
}

double StageCostModel::gradient_bucket_bytes(int i, int j) const {
  if (gradient_bucket_bytes_ > 0 || zero_ < 2 || data_parallel_ <= 1) return gradient_bucket_bytes_;
  double largest = 0;
  for (int l = i; l < j; ++l) largest = std::max(largest, comm_params_[l + 1] - comm_params_[l]);
  return largest * bytes_per_element(model_.gradients());
}

double StageCostModel::layer_gather_s(int l, int s) const {
  if (data_parallel_ <= 1) return 0;
  const double bytes = (comm_params_[l + 1] - comm_params_[l]) * bytes_per_element(model_.precision) * tensor_parallel_;
  if (bytes <= 0) return 0;
  return collective(CollectiveAlgorithm::RingAllGather).seconds(shard_links_.at(rank_of(s)), bytes, shard_, 1);
}

double StageCostModel::layer_pass_s(schedule::Op op, int l, int s, bool nograd) const {
  using schedule::Op;
  switch (op) {
    case Op::F: return nograd ? sum(forward_nograd_, l, l + 1, s) : sum(forward_, l, l + 1, s);
    case Op::R: return sum(recompute_, l, l + 1, s);
    case Op::B: return sum(input_grad_, l, l + 1, s) + sum(weight_grad_, l, l + 1, s);
    case Op::I: return sum(input_grad_, l, l + 1, s);
    default: return 0;
  }
}

double StageCostModel::gather_exposed_s(int i, int j, int s, schedule::Op op) const {
  using schedule::Op;
  if (zero_ != 3 || data_parallel_ <= 1 || !(op == Op::F || op == Op::R || op == Op::B || op == Op::I)) return 0;
  // The layers the action runs: R only those it recomputes; the forward
  // without autograd where it checkpoints them.
  auto [a, e] = op == Op::R ? recomputed_layers(i, j) : std::pair{i, j};
  const auto [ca, ce] = checkpoints() ? recomputed_layers(i, j) : std::pair{i, i};
  const bool backward = op == Op::B || op == Op::I;
  std::vector<GatheredUnit> units;
  double computing = 0;
  for (int n = 0; n < e - a; ++n) {
    const int l = backward ? e - 1 - n : a + n;
    const double c = layer_pass_s(op, l, s, op == Op::F && l >= ca && l < ce);
    const double g = layer_gather_s(l, s);
    if (g > 0 || units.empty()) {
      units.push_back({g, c});
    } else {
      units.back().compute_s += c;
    }
    computing += c;
  }
  return std::max(0.0, prefetched_pass_s(units) - computing);
}

void StageCostModel::check_context(const Model& m) const {
  if (context_ <= 1) return;
  for (const auto& layer : m.layers) {
    if (layer.cost.cp_kv_elems <= 0) continue;
    // Load-balanced causal chunks: each rank takes the i-th and the (2C-1-i)-th of 2C.
    if (layer.shape.seq_len % (2 * context_) != 0) {
      throw Error("context parallelism of " + std::to_string(context_) + ": model " + m.name + "'s sequence of " +
                  std::to_string(layer.shape.seq_len) + " tokens does not split into 2 x " + std::to_string(context_) +
                  " equal chunks (each rank takes two, for a causal attention's balance)");
    }
    return;
  }
  throw Error("context parallelism splits a sequence's attention: model " + m.name + " (family " + m.family +
              ") has no attention (the transformer and llm families' blocks do)");
}

std::pair<double, double> StageCostModel::context_exchange_s(int k, int l, std::pair<double, double> fused) const {
  const auto& c = model_.layers[l].cost;
  if (context_ <= 1 || c.cp_kv_elems <= 0) return {0, 0};
  const double C = context_;
  // A step's message: one rank's chunk of the keys and values (the group's T streams together).
  const double step = context_links_[k].seconds(static_cast<double>(c.cp_kv_elems) * microbatch_size_ *
                                                bytes_per_element(model_.precision));
  if (context_all_gather_) return {(C - 1) * step, (C - 1) * step};  // gathered, then dK and dV reduce-scattered
  // Under each step, the attention of the block held: the rank's core (1/C
  // of the layer's, balanced), in C blocks; the backward's is twice the
  // forward's and passes dK and dV too.
  const auto [fused_f, fused_b] = fused;
  const double core_f = fused_f > 0 ? fused_f / C
                                    : devices_[k].compute_seconds(c.selective_flops * microbatch_size_ / tensor_parallel_, model_.precision) / C;
  const double core_b = fused_f > 0 ? fused_b / C : 2 * core_f;
  return {(C - 1) * std::max(0.0, step - core_f), (C - 1) * std::max(0.0, 2 * step - core_b)};
}

std::pair<double, double> StageCostModel::fused_core_s(int k, int l) const {
  const Device& d = devices_[k];
  const Layer& layer = model_.layers[l];
  const auto& c = layer.cost;
  if (d.attention.empty() || c.attention_seq <= 0 || c.selective_flops <= 0 || model_.precision == Precision::FP32 ||
      d.has_kind(kind_name(layer.kind))) {
    return {0, 0};
  }
  const double flops = c.selective_flops * microbatch_size_ / tensor_parallel_;
  const double seq = static_cast<double>(c.attention_seq) / context_;
  return {d.attention.forward_seconds(flops, seq, c.attention_causal), d.attention.backward_seconds(flops, seq, c.attention_causal)};
}

void StageCostModel::check_experts(const Model& m) const {
  if (experts_total_ <= 1) return;
  for (const auto& layer : m.layers) {
    if (layer.shape.experts <= 0) continue;
    if (layer.shape.experts % experts_total_ != 0) {
      throw Error("expert parallelism of " + std::to_string(experts_total_) + ": model " + m.name + "'s " +
                  std::to_string(layer.shape.experts) + " experts per layer do not split evenly over " +
                  std::to_string(experts_total_) + " devices");
    }
    return;
  }
  throw Error("expert parallelism splits a mixture's experts: model " + m.name + " (family " + m.family +
              ") has none (family moe, or a Mixtral, Qwen3-MoE or DeepSeek-V3 config.json, has)");
}

double StageCostModel::expert_extra(int l) const {
  return experts_total_ > 1 ? model_.layers[l].cost.expert_load - 1 : 0;
}

double StageCostModel::expert_exchange_bytes(int l) const {
  const auto& c = model_.layers[l].cost;
  if (experts_total_ <= 1 || c.dispatch_elems <= 0) return 0;
  // The busiest device receives its load's share of the tokens (the group's
  // T streams together; folded, each device its 1/T of them alone).
  return static_cast<double>(c.dispatch_elems) * microbatch_size_ * bytes_per_element(model_.precision) * c.expert_load /
         (fold_experts_ ? tensor_parallel_ : 1);
}

double StageCostModel::expert_exchange_s(int k, int l) const {
  const double bytes = expert_exchange_bytes(l);
  return bytes > 0 ? expert_links_[k].seconds(bytes) : 0;
}

StageCostModel::Exchanges StageCostModel::expert_exchanges(int i, int j) const {
  Exchanges out;
  for (int l = i; l < j; ++l) {
    const double bytes = expert_exchange_bytes(l);
    if (bytes <= 0) continue;
    out.count += 2;  // dispatch and combine
    out.bytes += 2 * bytes;
  }
  if (out.count > 0) out.bytes /= out.count;
  return out;
}

double StageCostModel::a2a_recompute_s(int i, int j, int s) const {
  if (!checkpoint_.by_layer()) return a2a_pass_s(i, j, s);
  const auto [a, e] = recomputed_layers(i, j);
  return a2a_pass_s(a, e, s);
}

StageCostModel::Exchanges StageCostModel::recompute_exchanges(int i, int j) const {
  if (!checkpoint_.by_layer()) return expert_exchanges(i, j);
  const auto [a, e] = recomputed_layers(i, j);
  return expert_exchanges(a, e);
}

}  // namespace pipetwin::models
