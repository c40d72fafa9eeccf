// StageCostModel's collectives: the tensor group's per layer, the data
// group's reduction per stage, and the algorithms and bytes of each.
#include <algorithm>
#include <string>

#include "models/stage_costs.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {

// Refuses a model with a layer that T devices cannot split; sums each
// layer's collectives per micro-batch (the same on every rank: the group's link).
void StageCostModel::init_tensor_parallel(int microbatch_size) {
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
    tp_forward_[l + 1] = tp_forward_[l] + c.tp_forward_collectives * one;
    tp_backward_[l + 1] = tp_backward_[l] + c.tp_backward_collectives * one;
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
  if (data_parallel_ <= 1 || bytes <= 0 || shard_optimizer_) return Collective::Ring;
  // A shared host's calibrated collectives are Gloo's rings (their rounds' work on the cores).
  if (hardware_.topology.kind == TopologyKind::SharedHost && hardware_.topology.collective.bandwidth > 0) {
    return Collective::Ring;
  }
  const Link& link = data_links_.at(rank_of(s));
  return choose_all_reduce(collective_, link, link, bytes, data_parallel_);
}

CollectiveAlgorithm StageCostModel::reduce_collective(int i, int j, int s) const {
  if (shard_optimizer_) return CollectiveAlgorithm::RingReduceScatter;
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
  return data_parallel_ > 1 ? (params_[j] - params_[i]) * bytes_per_element(model_.gradients()) : 0;
}

double StageCostModel::gather_bytes(int i, int j) const {
  return data_parallel_ > 1 && shard_optimizer_ ? (params_[j] - params_[i]) * bytes_per_element(model_.precision) : 0;
}

}  // namespace pipetwin::models
