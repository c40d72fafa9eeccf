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
    // The op policy re-runs its block's forward but the saved products and
    // attention kernel: their share of the FLOPs, all its elementwise
    // traffic, and its collectives (with sequence parallelism only the
    // all-gathers: the reduce-scatters' outputs are saved).
    const auto recompute_share = [&](double flops) {
      return c.forward_flops > 0 ? pass_seconds(Pass::Recompute) * flops / c.forward_flops : 0;
    };
    double selective = 0;
    const bool by_op = checkpoint_.by_op(), picked = recompute_policy_ == schedule::RecomputePolicy::Selective;
    if (picked && by_op && c.op_saved_elems > 0) {
      selective = recompute_share(c.op_recompute_flops) + fwd_mem + (sequence_parallel_ ? fwd_comm / 2 : fwd_comm);
    } else if (picked && !by_op && c.selective_flops > 0) {
      selective = recompute_share(c.selective_flops) + traffic(c.selective_traffic, 0);
    }
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
    for (int k = 0; k < K; ++k) {
      data_links_.push_back(data_group_link(hw.topology, T, data_parallel_, k));
      shard_links_.push_back(data_subgroup_link(hw.topology, T, data_parallel_, k, shard_, 1));
    }
  }
  const double b = r.microbatch_size;
  for (auto* prefix : {&forward_, &input_grad_, &weight_grad_, &forward_nograd_, &recompute_}) {
    prefix->assign(K, std::vector<double>(n + 1, 0));
  }
  // Ranks on equal devices share their times (every rank of a uniform
  // cluster: K x layers of device curves was a third of a K = 512 step's work).
  for (int k = 0; k < K; ++k) {
    const auto same = std::find(devices_.begin(), devices_.begin() + k, devices_[k]);
    if (same == devices_.begin() + k) {
      time_layers(k, b);
      continue;
    }
    const auto j = same - devices_.begin();
    for (auto* prefix : {&forward_, &input_grad_, &weight_grad_, &forward_nograd_, &recompute_}) (*prefix)[k] = (*prefix)[j];
  }
  params_.assign(n + 1, 0);
  stashed_.assign(n + 1, 0);
  weight_grad_stash_.assign(n + 1, 0);
  workspace_.assign(n, 0);
  const bool by_op = recompute_policy_ == schedule::RecomputePolicy::Selective && checkpoint_.by_op();
  const bool selective = recompute_policy_ == schedule::RecomputePolicy::Selective && !by_op;
  for (int l = 0; l < n; ++l) {
    const LayerMemory lm = layer_memory(m.layers[l].cost, m.precision, T, sequence_parallel_, selective, by_op);
    params_[l + 1] = params_[l] + lm.params;
    stashed_[l + 1] = stashed_[l] + lm.stashed;
    weight_grad_stash_[l + 1] = weight_grad_stash_[l] + lm.weight_grad_stash;
    workspace_[l] = lm.workspace;
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

double StageCostModel::step_s(int i, int j, int s) const {
  // ZeRO-1: each device of the data group steps its 1/D of the stage.
  const double p = (params_[j] - params_[i]) / (zero_ >= 1 ? shard_ : 1);
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
  // ZeRO-1 shards the fp32 master copy and the optimizer states over the
  // data group, ZeRO-2 the gradients too, ZeRO-3 the weights too (between
  // their uses: the units gathered at a time are workspace).
  const double D = shard_;  // ZeRO's shards: the data group, or HSDP's shard group
  const double sharded = (master_bytes(model_.precision) + 4 * optimizer_states(optimizer_)) / (zero_ >= 1 ? D : 1);
  return p * (bytes * st.weight_versions / (shards_weights() ? D : 1) +
              bytes_per_element(model_.gradients()) / (shards_gradients() ? D : 1) + sharded);
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
  double most = 0, largest = 0;  // largest: the largest layer's weights (an FSDP unit)
  for (int l = i; l < j; ++l) most = std::max(most, workspace_[l]), largest = std::max(largest, params_[l + 1] - params_[l]);
  // ZeRO-2 and 3: a layer's gradients whole until reduce-scattered; ZeRO-3:
  // the unit computing and the one prefetched, gathered whole.
  const double sharding = (shards_gradients() ? largest * bytes_per_element(model_.gradients()) : 0) +
                          (shards_weights() ? 2 * largest * bytes_per_element(model_.precision) : 0);
  return most * microbatch_size_ + sharding;
}

// The stash peaks where a backward starts (every schedule runs one there
// before it frees a micro-batch): its working memory comes on top.
double StageCostModel::memory_bytes(int i, int j, int s) const { return memory_parts(i, j, s).total(); }

StageCostModel::MemoryParts StageCostModel::memory_parts(int i, int j, int s) const {
  const auto& st = stash_counts_.at(s);
  const double p = params_[j] - params_[i];
  MemoryParts m;
  const double D = shard_;  // ZeRO's shards: the data group, or HSDP's shard group
  m.weights = p * bytes_per_element(model_.precision) * st.weight_versions / (shards_weights() ? D : 1);
  m.gradients = p * bytes_per_element(model_.gradients()) / (shards_gradients() ? D : 1);
  m.optimizer = static_bytes(i, j, s) - m.weights - m.gradients;
  m.activations = st.peak_bytes(whole_stash_bytes(i, j), checkpoint_stash_bytes(i, j), weight_grad_bytes(i, j));
  m.workspace = workspace_bytes(i, j);
  m.reserve = device_of(s).reserve_bytes(m.total());
  return m;
}

}  // namespace pipetwin::models
