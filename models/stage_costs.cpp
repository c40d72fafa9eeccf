// StageCostModel: prefix sums over the layer order, per rank's device.
#include "models/stage_costs.hpp"

#include <algorithm>
#include <tuple>

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

namespace {

// Megatron-LM and torchtitan checkpoint the blocks: never the embedding, the
// output head or the loss. Per position p: the first recomputable layer at or
// after p, and one past the last recomputable layer before p.
std::pair<std::vector<int>, std::vector<int>> recomputable_bounds(const Model& m) {
  const int n = static_cast<int>(m.layers.size());
  const auto recomputable = [&](int l) {
    switch (m.layers[l].kind) {
      case LayerKind::Embedding:
      case LayerKind::LlmEmbedding:
      case LayerKind::LmHead:
      case LayerKind::LlmHead:
      case LayerKind::ClassifierHead: return false;
      default: return true;
    }
  };
  std::vector<int> first(n + 1, n), end(n + 1, 0);
  for (int l = n - 1; l >= 0; --l) first[l] = recomputable(l) ? l : first[l + 1];
  for (int l = 0; l < n; ++l) end[l + 1] = recomputable(l) ? l + 1 : end[l];
  return {first, end};
}

}  // namespace

void StageCostModel::time_layers(int k, double b) {
  const Device& d = devices_[k];
  const int T = tensor_parallel_, n = static_cast<int>(model_.layers.size());
  const Model& m = model_;
  for (int l = 0; l < n; ++l) {
    const auto& c = m.layers[l].cost;
    const std::string_view kind = kind_name(m.layers[l].kind);
    const int ops = operators(m, l);  // for a per-operator (pooled) curve
    // Split over a tensor-parallel group, each device's share of the work
    // runs at the efficiency of its smaller matrices (the curve at work / T).
    const double share = b / T;
    const double f = c.forward_flops * share;
    // Each device's weights (its share under tensor parallelism); an
    // embedding gathers rows, not its whole table.
    const double weights = pass_weight_bytes(m, l) / (c.tensor_split ? T : 1);
    double in = 0, w = 0;
    if (d.has_kind(kind)) {
      // A calibrated kind times the layer's whole backward on its curve,
      // shared between I and W in proportion to their work.
      const double bwd = (c.input_grad_flops + c.weight_grad_flops) * share;
      const double t = d.layer_seconds(kind, Pass::Backward, bwd, m.precision, ops) +
                       (bwd > 0 ? d.weight_stream_seconds(Pass::Backward, weights) : 0);
      // Shared as measured where a calibration saw I and W apart, else by FLOPs.
      const auto* curves = d.kind_curves(kind);
      const double w_share = c.weight_grad_flops <= 0       ? 0
                             : curves->weight_grad_share ? *curves->weight_grad_share
                                                         : (bwd > 0 ? c.weight_grad_flops * share / bwd : 0);
      in = bwd > 0 ? t * (1 - w_share) : 0;
      w = bwd > 0 ? t - in : 0;
    } else {
      in = d.compute_seconds(c.input_grad_flops * share, m.precision);
      w = d.compute_seconds(c.weight_grad_flops * share, m.precision);
    }
    // The weights' floor: a forward and an input gradient read each weight
    // once, a weight gradient reads and writes each gradient (accumulated over
    // the micro-batches).
    const double read = d.weight_seconds(weights);
    // A calibrated kind's layer streams its weights in each pass (Device::weight_stream).
    const auto pass_seconds = [&](Pass pass) {
      const double t = d.layer_seconds(kind, pass, f, m.precision, ops);
      return f > 0 && d.has_kind(kind) ? t + d.weight_stream_seconds(pass, weights) : t;
    };
    if (c.input_grad_flops > 0) in = std::max(in, read);
    if (c.weight_grad_flops > 0) w = std::max(w, 2 * read);
    const auto floored = [&](double t) { return c.forward_flops > 0 ? std::max(t, read) : t; };
    const double fwd_comm = tp_forward_[l + 1] - tp_forward_[l], bwd_comm = tp_backward_[l + 1] - tp_backward_[l];
    // Elementwise traffic: the replicated part whole on each device unless
    // sequence parallelism splits it, the rest split over the group.
    const double whole_share = sequence_parallel_ ? share : b;
    const auto traffic = [&](double total, double replicated) {
      return d.traffic_seconds(kind, replicated * whole_share + (total - replicated) * share);
    };
    const double fwd_mem = traffic(c.forward_traffic, c.forward_traffic_replicated);
    const double bwd_mem = traffic(c.backward_traffic, c.backward_traffic_replicated);
    forward_[k][l + 1] = forward_[k][l] + floored(pass_seconds(Pass::Forward)) + fwd_comm + fwd_mem;
    forward_nograd_[k][l + 1] =
        forward_nograd_[k][l] + floored(pass_seconds(Pass::ForwardNoGrad)) + fwd_comm + fwd_mem;
    recompute_[k][l + 1] =
        recompute_[k][l] + floored(pass_seconds(Pass::Recompute)) + fwd_comm + fwd_mem;
    // Selective recompute re-runs the attention core inside the backward: its
    // share of the layer's recompute, and its traffic.
    const double selective = recompute_policy_ == schedule::RecomputePolicy::Selective && c.selective_flops > 0
                                 ? (c.forward_flops > 0 ? pass_seconds(Pass::Recompute) * c.selective_flops / c.forward_flops : 0) +
                                       traffic(c.selective_traffic, 0)
                                 : 0;
    input_grad_[k][l + 1] = input_grad_[k][l] + in + bwd_comm + bwd_mem + selective;
    weight_grad_[k][l + 1] = weight_grad_[k][l] + w;
  }
}

StageCostModel::StageCostModel(const Model& m, const Hardware& hw, const PartitionRequest& r)
    : model_(m),
      hardware_(hw),
      microbatch_size_(r.microbatch_size),
      optimizer_(r.optimizer),
      recompute_policy_(r.recompute()),
      checkpoint_(r.checkpoint),
      tensor_parallel_(r.program.tensor_parallel),
      data_parallel_(r.program.data_parallel),
      sequence_parallel_(r.program.sequence_parallel),
      shard_optimizer_(r.program.shard_optimizer) {
  collective_ = r.collective;
  const int n = static_cast<int>(m.layers.size());
  if (checkpoint_.by_layer()) {
    if (recompute_policy_ != schedule::RecomputePolicy::Full) {
      throw Error("recompute by layer (uniform, block) checkpoints every micro-batch: it needs the schedule's recompute "
                  "full, not " + std::string(schedule::recompute_name(recompute_policy_)));
    }
    if (checkpoint_.layers < 1) throw Error("recompute by layer: the layer count N must be at least 1");
  }
  const int T = tensor_parallel_;
  init_tensor_parallel(r.microbatch_size);
  const int K = r.ranks();
  if (!hw.devices.empty() && T * data_parallel_ > 1) {
    throw Error("hardware " + hw.name + " lists its devices one by one (`devices:`), one per pipeline rank; with T = " +
                std::to_string(T) + " and D = " + std::to_string(data_parallel_) +
                " every device of a group and a replica must be the same: give one `device`");
  }
  devices_ = r.devices.empty() ? hw.rank_devices(K) : r.devices;
  if (static_cast<int>(devices_.size()) != K) {
    throw Error("partition: " + std::to_string(devices_.size()) + " devices given for " + std::to_string(K) + " ranks");
  }
  if (static_cast<int>(r.program.stage_to_rank.size()) != r.stages()) {
    throw Error("partition: the schedule places " + std::to_string(r.program.stage_to_rank.size()) + " stages, not " +
                std::to_string(r.stages()));
  }
  for (const auto rank : r.program.stage_to_rank) stage_rank_.push_back(rank.value);
  if (data_parallel_ > 1) {
    for (int k = 0; k < K; ++k) data_links_.push_back(data_group_link(hw.topology, T, data_parallel_, k));
  }
  const double b = r.microbatch_size;
  for (auto* prefix : {&forward_, &input_grad_, &weight_grad_, &forward_nograd_, &recompute_}) {
    prefix->assign(K, std::vector<double>(n + 1, 0));
  }
  for (int k = 0; k < K; ++k) time_layers(k, b);
  params_.assign(n + 1, 0);
  stashed_.assign(n + 1, 0);
  weight_grad_stash_.assign(n + 1, 0);
  workspace_.assign(n, 0);
  for (int l = 0; l < n; ++l) {
    const auto& c = m.layers[l].cost;
    const bool selective = recompute_policy_ == schedule::RecomputePolicy::Selective;
    // Selective recompute: the core's scores are back while the backward runs.
    workspace_[l] = (c.backward_workspace_bytes +
                     (selective ? static_cast<double>(c.selective_elems) * bytes_per_element(m.precision) : 0)) /
                    (c.tensor_split ? T : 1);
    const double whole_params = static_cast<double>(c.tp_replicated_params);
    params_[l + 1] = params_[l] + (static_cast<double>(c.params) - whole_params) / T + whole_params;
    // Sequence parallelism splits all of it; without, the norms and dropouts stay whole.
    const double whole = sequence_parallel_ ? 0 : static_cast<double>(c.tp_replicated_elems);
    const double freed = selective ? static_cast<double>(c.selective_elems) : 0;
    stashed_[l + 1] = stashed_[l] + whole + (static_cast<double>(c.stashed_elems) - freed - whole) / T;
    // Whole with sequence parallelism too: the executor keeps the gathered input.
    const double w_whole = static_cast<double>(c.weight_grad_replicated_elems);
    weight_grad_stash_[l + 1] = weight_grad_stash_[l] + w_whole + (static_cast<double>(c.weight_grad_elems) - w_whole) / T;
  }
  cut_ = m.cut_elems();
  std::tie(first_recomputable_, end_recomputable_) = recomputable_bounds(m);
  // How many micro-batches each stage stashes under this schedule: the IR's accounting.
  stash_counts_ = schedule::account_memory(r.program);
}

double StageCostModel::cut_bytes(int p) const {
  return static_cast<double>(cut_[p]) * bytes_per_element(model_.precision) * microbatch_size_;
}

namespace {
double optimizer_states(Optimizer o) { return o == Optimizer::Adam ? 2 : o == Optimizer::Momentum ? 1 : 0; }
double master_bytes(Precision p) { return p == Precision::FP32 ? 0 : 4; }
}  // namespace

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

double StageCostModel::step_s(int i, int j, int s) const {
  // ZeRO-1: each device of the data group steps its 1/D of the stage.
  const double p = (params_[j] - params_[i]) / (shard_optimizer_ ? data_parallel_ : 1);
  const double bytes = bytes_per_element(model_.precision);
  // Read gradients, read and write weights, master copy and each optimizer state.
  const double traffic = p * (bytes_per_element(model_.gradients()) + 2 * bytes + 2 * master_bytes(model_.precision) +
                              8 * optimizer_states(optimizer_));
  const Device& d = device_of(s);
  return d.memory_bandwidth > 0 ? d.step_overhead() + traffic / d.memory_bandwidth : 0;
}

double StageCostModel::cold_forward_s(int i, int j, int s) const {
  const Device& d = device_of(s);
  return d.cold_weights_bandwidth > 0 ? (params_[j] - params_[i]) * bytes_per_element(model_.precision) / d.cold_weights_bandwidth
                                      : 0;
}

std::pair<int, int> StageCostModel::recomputed_layers(int i, int j) const {
  if (!checkpoint_.by_layer()) return {i, j};
  const int a = first_recomputable_[i], e = end_recomputable_[j];
  if (a >= e) return {i, i};
  return {a, checkpoint_.method == Checkpoint::Block ? std::min(e, a + checkpoint_.layers) : e};
}

double StageCostModel::scheduled_forward_s(int i, int j, int s) const {
  // Checkpointed micro-batches run their forward without autograd (with
  // except-last, all but the last one: the stage's F is counted as theirs).
  if (!checkpoints()) return forward_s(i, j, s);
  if (!checkpoint_.by_layer()) return forward_nograd_s(i, j, s);
  const auto [a, e] = recomputed_layers(i, j);
  return forward_s(i, j, s) - sum(forward_, a, e, s) + sum(forward_nograd_, a, e, s);
}

double StageCostModel::recompute_action_s(int i, int j, int s) const {
  if (!checkpoint_.by_layer()) return recompute_s(i, j, s);
  const auto [a, e] = recomputed_layers(i, j);
  return recompute_s(a, e, s);
}

double StageCostModel::compute_s(int i, int j, int s) const {
  double t = scheduled_forward_s(i, j, s) + backward_s(i, j, s);
  if (checkpoints()) t += recompute_action_s(i, j, s);
  return t;
}

double StageCostModel::transfer_s(int i, int j, int s) const {
  const int S = static_cast<int>(stage_rank_.size()), n = static_cast<int>(model_.layers.size());
  double t = 0;
  const auto hop = [&](int a, int b, double bytes) {
    // Replica 0's tensor-parallel groups at the two ranks (Program::first_device).
    const int T = tensor_parallel_, TD = tensor_parallel_ * data_parallel_;
    const Link l = hardware_.topology.path_group(TD * rank_of(a), TD * rank_of(b), T);
    return 2 * (device_of(a).transfer_overhead_s + l.seconds(bytes));  // activations forward, gradients backward
  };
  if (i > 0 && s > 0 && rank_of(s - 1) != rank_of(s)) t += hop(s - 1, s, cut_bytes(i));
  if (j < n && s + 1 < S && rank_of(s + 1) != rank_of(s)) t += hop(s, s + 1, cut_bytes(j));
  return t;
}

double StageCostModel::static_bytes(int i, int j, int s) const {
  const double p = params_[j] - params_[i];
  const auto& st = stash_counts_.at(s);
  const double bytes = bytes_per_element(model_.precision);
  // ZeRO-1 shards the fp32 master copy and the optimizer states over the data group.
  const double sharded = (master_bytes(model_.precision) + 4 * optimizer_states(optimizer_)) /
                         (shard_optimizer_ ? data_parallel_ : 1);
  return p * (bytes * st.weight_versions + bytes_per_element(model_.gradients()) + sharded);
}

double StageCostModel::activation_bytes(int i, int j) const {
  const double layers = stash_range_bytes(i, j);
  // The received input stays with the micro-batch (its gradient is read
  // there); the model input (i = 0) is data, counted by neither.
  return i > 0 && i < j && !model_.layers[i].cost.keeps_input ? layers + input_bytes(i) : layers;
}

double StageCostModel::stash_range_bytes(int i, int j) const {
  return (stashed_[j] - stashed_[i]) * bytes_per_element(model_.precision) * microbatch_size_;
}

double StageCostModel::checkpoint_stash_bytes(int i, int j) const {
  if (!checkpoint_.by_layer()) return input_bytes(i);
  const auto [a, e] = recomputed_layers(i, j);
  if (a == e) return activation_bytes(i, j);  // nothing here is recomputed
  // The layers it does not recompute keep their stash (the stage's received
  // input with them where the first of them does not keep it).
  double bytes = stash_range_bytes(i, a) + stash_range_bytes(e, j);
  if (a > i && i > 0 && !model_.layers[i].cost.keeps_input) bytes += input_bytes(i);
  // Each checkpoint keeps its input: every group's (uniform), every layer's (block).
  const int step = checkpoint_.method == Checkpoint::Uniform ? checkpoint_.layers : 1;
  for (int g = a; g < e; g += step) bytes += input_bytes(g);
  return bytes;
}

double StageCostModel::whole_stash_bytes(int i, int j) const {
  if (!checkpoint_.by_layer()) return activation_bytes(i, j);
  const auto [a, e] = recomputed_layers(i, j);
  if (a == e) return activation_bytes(i, j);
  // Re-materialized one checkpoint at a time: the largest one's stash on
  // top of the checkpoints (less its input, kept already).
  const int step = checkpoint_.method == Checkpoint::Uniform ? checkpoint_.layers : 1;
  double largest = 0;
  for (int g = a; g < e; g += step) {
    const double kept_input = model_.layers[g].cost.keeps_input ? input_bytes(g) : 0;
    largest = std::max(largest, stash_range_bytes(g, std::min(e, g + step)) - kept_input);
  }
  return checkpoint_stash_bytes(i, j) + largest;
}

double StageCostModel::weight_grad_bytes(int i, int j) const {
  return (weight_grad_stash_[j] - weight_grad_stash_[i]) * bytes_per_element(model_.precision) * microbatch_size_;
}

double StageCostModel::workspace_bytes(int i, int j) const {
  double most = 0;
  for (int l = i; l < j; ++l) most = std::max(most, workspace_[l]);
  return most * microbatch_size_;
}

// The stash peaks where a backward starts (every schedule runs one there
// before it frees a micro-batch): its working memory comes on top.
double StageCostModel::memory_bytes(int i, int j, int s) const { return memory_parts(i, j, s).total(); }

StageCostModel::MemoryParts StageCostModel::memory_parts(int i, int j, int s) const {
  const auto& st = stash_counts_.at(s);
  const double p = params_[j] - params_[i];
  MemoryParts m;
  m.weights = p * bytes_per_element(model_.precision) * st.weight_versions;
  m.gradients = p * bytes_per_element(model_.gradients());
  m.optimizer = static_bytes(i, j, s) - m.weights - m.gradients;
  m.activations = st.peak_bytes(whole_stash_bytes(i, j), checkpoint_stash_bytes(i, j), weight_grad_bytes(i, j));
  m.workspace = workspace_bytes(i, j);
  m.reserve = device_of(s).reserve_bytes(m.total());
  return m;
}

}  // namespace pipetwin::models
