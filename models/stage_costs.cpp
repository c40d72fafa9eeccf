// StageCostModel: prefix sums over the layer order, per rank's device.
#include "models/stage_costs.hpp"

#include <algorithm>
#include <tuple>

#include "schedule/error.hpp"

namespace pipetwin::models {

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

std::pair<int, int> recomputed_range(const std::vector<int>& first, const std::vector<int>& end,
                                     const LayerCheckpoint& checkpoint, int i, int j) {
  if (!checkpoint.by_layer()) return {i, j};
  const int a = first[i], e = end[j];
  if (a >= e) return {i, i};
  return {a, checkpoint.method == Checkpoint::Block ? std::min(e, a + checkpoint.layers) : e};
}

// A layer method needs every micro-batch checkpointed; op, the selective
// policy and a model that describes its operators.
void check_checkpoint(const Model& m, schedule::RecomputePolicy policy, LayerCheckpoint checkpoint) {
  if (checkpoint.by_layer()) {
    if (policy != schedule::RecomputePolicy::Full) {
      throw Error("recompute by layer (uniform, block) checkpoints every micro-batch: it needs the schedule's recompute "
                  "full, not " + std::string(schedule::recompute_name(policy)));
    }
    if (checkpoint.layers < 1) throw Error("recompute by layer: the layer count N must be at least 1");
  }
  if (checkpoint.by_op()) {
    if (policy != schedule::RecomputePolicy::Selective) {
      throw Error("recompute op saves operators inside each layer: it needs the schedule's recompute selective, not " +
                  std::string(schedule::recompute_name(policy)));
    }
    const bool described = std::any_of(m.layers.begin(), m.layers.end(), [](const Layer& l) { return l.cost.op_saved_elems > 0; });
    if (!described) {
      throw Error("recompute op (torchtitan's per-operator policy) is described for the llm family's decoder blocks; model " +
                  m.name + " (family " + m.family + ") has none: use selective, uniform[:N] or full");
    }
  }
}

}  // namespace

std::pair<int, int> recomputed_layers(const Model& model, const LayerCheckpoint& checkpoint, int i, int j) {
  const auto [first, end] = recomputable_bounds(model);
  return recomputed_range(first, end, checkpoint, i, j);
}

StageCostModel::StageCostModel(const Model& m, const Hardware& hw, const PartitionRequest& r)
    : model_(m),
      hardware_(hw),
      microbatch_size_(static_cast<double>(r.microbatch_size) / r.program.context_parallel),
      optimizer_(r.optimizer),
      recompute_policy_(r.recompute()),
      checkpoint_(r.checkpoint),
      tensor_parallel_(r.program.tensor_parallel),
      data_parallel_(r.program.data_parallel),
      shard_(r.program.shard_degree()),
      sequence_parallel_(r.program.sequence_parallel),
      zero_(r.program.zero),
      reshard_after_forward_(r.program.reshard_after_forward),
      gradient_bucket_bytes_(r.gradient_bucket_bytes),
      gradient_first_bucket_bytes_(r.gradient_first_bucket_bytes) {
  collective_ = r.collective;
  const int n = static_cast<int>(m.layers.size());
  check_checkpoint(m, recompute_policy_, checkpoint_);
  const int T = tensor_parallel_;
  context_ = r.program.context_parallel;
  context_all_gather_ = r.context_all_gather;
  check_context(m);
  expert_ = r.program.expert_replicas();
  experts_total_ = r.program.expert_parallel;
  fold_experts_ = r.program.folds_experts();
  check_experts(m);
  init_tensor_parallel(microbatch_size_);
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
  check_fp8();
  init_group_links(K);
  const double b = microbatch_size_;
  for (auto* prefix : {&forward_, &input_grad_, &weight_grad_, &forward_nograd_, &recompute_, &a2a_}) {
    prefix->assign(K, std::vector<double>(n + 1, 0));
  }
  // Ranks on equal devices share their times (every rank of a uniform
  // cluster: K x layers of device curves was a third of a K = 512 step's work).
  for (int k = 0; k < K; ++k) {
    auto same = std::find(devices_.begin(), devices_.begin() + k, devices_[k]);
    // With context parallelism each rank's group has its own link.
    if (context_ > 1 && same != devices_.begin() + k && !(context_links_[same - devices_.begin()] == context_links_[k])) {
      same = devices_.begin() + k;
    }
    if (experts_total_ > 1 && same != devices_.begin() + k && !(expert_links_[same - devices_.begin()] == expert_links_[k])) {
      same = devices_.begin() + k;  // and each its expert group's
    }
    if (same == devices_.begin() + k) {
      time_layers(k, b);
      continue;
    }
    const auto j = same - devices_.begin();
    for (auto* prefix : {&forward_, &input_grad_, &weight_grad_, &forward_nograd_, &recompute_, &a2a_}) {
      (*prefix)[k] = (*prefix)[j];
    }
  }
  size_layers();
  cut_ = m.cut_elems();
  std::tie(first_recomputable_, end_recomputable_) = recomputable_bounds(m);
  // How many micro-batches each stage stashes under this schedule: the IR's accounting.
  stash_counts_ = schedule::account_memory(r.program);
}

void StageCostModel::check_fp8() const {
  if (model_.precision != Precision::FP8) return;
  for (const Device& d : devices_) {
    if (d.peak_flops_fp8 <= 0) {
      throw Error("model " + model_.name + " is in precision fp8, but hardware " + hardware_.name + "'s device " + d.name +
                  " gives no FP8 rate (peak_flops_fp8): FP8 products run on H100 and later");
    }
  }
}

void StageCostModel::init_group_links(int K) {
  if (data_parallel_ <= 1) return;
  const auto& topo = hardware_.topology;
  const int T = tensor_parallel_;
  for (int k = 0; k < K; ++k) {
    data_links_.push_back(data_group_link(topo, T, data_parallel_, k));
    shard_links_.push_back(data_subgroup_link(topo, T, data_parallel_, k, shard_, 1));
    if (context_ > 1) context_links_.push_back(data_subgroup_link(topo, T, data_parallel_, k, context_, 1));
    if (experts_total_ > 1) {
      expert_links_.push_back(fold_experts_ ? all_to_all_folded(topo, T, data_parallel_, k, expert_)
                                            : all_to_all(topo, T, data_parallel_, k, expert_));
    }
  }
}

double StageCostModel::cut_bytes(int p) const {
  return static_cast<double>(cut_[p]) * bytes_per_element(model_.precision) * microbatch_size_;
}

namespace {
double optimizer_states(Optimizer o) { return o == Optimizer::Adam ? 2 : o == Optimizer::Momentum ? 1 : 0; }
double master_bytes(Precision p) { return p == Precision::FP32 ? 0 : 4; }
}  // namespace

double StageCostModel::step_s(int i, int j, int s) const {
  // ZeRO-1: each device of the data group steps its 1/D of the stage.
  const double p = zero_ >= 1 ? (zero_params_[j] - zero_params_[i]) / shard_ : params_[j] - params_[i];
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
  return recomputed_range(first_recomputable_, end_recomputable_, checkpoint_, i, j);
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
  // Held whole, and as ZeRO's shards divide them (they differ for a mixture's experts).
  const double p = params_[j] - params_[i], z = zero_params_[j] - zero_params_[i];
  const auto& st = stash_counts_.at(s);
  const double bytes = bytes_per_element(model_.precision);
  // ZeRO-1 shards the fp32 master copy and the optimizer states over the
  // data group, ZeRO-2 the gradients too, ZeRO-3 the weights too (between
  // their uses: the units gathered at a time are workspace).
  const double D = shard_;  // ZeRO's shards: the data group, or HSDP's shard group
  const double state = master_bytes(model_.precision) + 4 * optimizer_states(optimizer_);
  const double weights = bytes * st.weight_versions, grads = bytes_per_element(model_.gradients());
  return (shards_weights() ? z * weights / D : p * weights) + (shards_gradients() ? z * grads / D : p * grads) +
         (zero_ >= 1 ? z * state / D : p * state);
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
  const int step = checkpoint_.group_size();
  for (int g = a; g < e; g += step) bytes += input_bytes(g);
  return bytes;
}

double StageCostModel::whole_stash_bytes(int i, int j) const {
  if (!checkpoint_.by_layer()) return activation_bytes(i, j);
  const auto [a, e] = recomputed_layers(i, j);
  if (a == e) return activation_bytes(i, j);
  // Re-materialized one checkpoint at a time: the largest one's stash on
  // top of the checkpoints (less its input, kept already).
  const int step = checkpoint_.group_size();
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
  double most = 0, largest = 0, cast = 0;  // largest: the largest layer's weights (an FSDP unit)
  for (int l = i; l < j; ++l) {
    most = std::max(most, workspace_[l]), largest = std::max(largest, params_[l + 1] - params_[l]);
    // FP8: the layer's matrices (its share) cast with their transposes, a byte each.
    const LayerCost& c = model_.layers[l].cost;
    // A mixture's experts: only its group's 1/E.
    const double matrices = static_cast<double>(c.fp8_params) - static_cast<double>(c.expert_params) * (1 - 1.0 / expert_);
    if (model_.precision == Precision::FP8) cast = std::max(cast, 2.0 * matrices / (c.tensor_split ? tensor_parallel_ : 1));
  }
  // ZeRO-2 and 3: a layer's gradients whole until reduce-scattered; ZeRO-3:
  // the unit computing and the one prefetched, gathered whole.
  const double sharding = (shards_gradients() ? largest * bytes_per_element(model_.gradients()) : 0) +
                          (shards_weights() ? 2 * largest * bytes_per_element(model_.precision) : 0);
  // FP8: the layer computing holds its matrices cast (the largest layer's).
  return most * microbatch_size_ + sharding + cast;
}

// The stash peaks where a backward starts (every schedule runs one there
// before it frees a micro-batch): its working memory comes on top.
double StageCostModel::memory_bytes(int i, int j, int s) const { return memory_parts(i, j, s).total(); }

StageCostModel::MemoryParts StageCostModel::memory_parts(int i, int j, int s) const {
  const auto& st = stash_counts_.at(s);
  const double p = params_[j] - params_[i], z = zero_params_[j] - zero_params_[i];
  MemoryParts m;
  const double D = shard_;  // ZeRO's shards: the data group, or HSDP's shard group
  m.weights = (shards_weights() ? z / D : p) * bytes_per_element(model_.precision) * st.weight_versions;
  m.gradients = (shards_gradients() ? z / D : p) * bytes_per_element(model_.gradients());
  m.optimizer = static_bytes(i, j, s) - m.weights - m.gradients;
  m.activations = st.peak_bytes(whole_stash_bytes(i, j), checkpoint_stash_bytes(i, j), weight_grad_bytes(i, j));
  m.workspace = workspace_bytes(i, j);
  m.reserve = device_of(s).reserve_bytes(m.total());
  return m;
}

}  // namespace pipetwin::models
