// What stage s costs when it holds layers [i, j): the times of its actions on
// its rank's device, the bytes crossing its cuts, and its memory. Prefix sums
// make every query O(1); the partitioner and the simulator share this model.
#pragma once

#include <utility>
#include <vector>

#include "models/collectives.hpp"
#include "models/hardware.hpp"
#include "models/model.hpp"
#include "models/partition.hpp"
#include "schedule/action.hpp"
#include "schedule/memory.hpp"

namespace pipetwin::models {

class StageCostModel {
 public:
  // `model` must be in a topological order and outlive this object.
  StageCostModel(const Model& model, const Hardware& hardware, const PartitionRequest& request);

  // The rank that holds stage s: the Program's placement (Program::stage_to_rank).
  int rank_of(int stage) const { return stage_rank_[stage]; }
  const Device& device_of(int stage) const { return devices_[rank_of(stage)]; }

  // Seconds of one micro-batch's action on stage s's device: layer by layer,
  // plus the device's fixed cost per action (action_overhead).
  double forward_s(int i, int j, int s) const { return sum(forward_, i, j, s) + action(Pass::Forward, i, j, s); }
  // The forward of a checkpointed micro-batch (no autograd), and its recompute.
  double forward_nograd_s(int i, int j, int s) const {
    return sum(forward_nograd_, i, j, s) + action(Pass::ForwardNoGrad, i, j, s);
  }
  double recompute_s(int i, int j, int s) const { return sum(recompute_, i, j, s) + action(Pass::Recompute, i, j, s); }
  double input_grad_s(int i, int j, int s) const { return sum(input_grad_, i, j, s) + action(Pass::Backward, i, j, s); }
  double weight_grad_s(int i, int j, int s) const { return sum(weight_grad_, i, j, s) + action(Pass::Backward, i, j, s); }
  double backward_s(int i, int j, int s) const {
    return sum(input_grad_, i, j, s) + sum(weight_grad_, i, j, s) + action(Pass::Backward, i, j, s);
  }
  // The forward that F runs under this request's recompute policy: without
  // autograd where it checkpoints (by layer: only the layers it recomputes).
  double scheduled_forward_s(int i, int j, int s) const;
  // What R runs: the stage's recompute, or by layer (uniform, block) only
  // the layers it checkpoints (never the embedding, the head or the loss).
  double recompute_action_s(int i, int j, int s) const;
  // The layers [begin, end) of [i, j) that a checkpointed micro-batch
  // re-runs: all of them for the whole stage; by layer, the recomputable
  // ones (uniform) or the first N of them (block).
  std::pair<int, int> recomputed_layers(int i, int j) const;
  // The extra of the stage's first forward in a step: its weights read at the
  // device's cold_weights_bandwidth (0 where it has none).
  double cold_forward_s(int i, int j, int s) const;
  // Optimizer step: memory-bound over weights, gradients and optimizer state.
  double step_s(int i, int j, int s) const;

  // F + B (+ R when recomputing): the stage's compute per micro-batch.
  double compute_s(int i, int j, int s) const;
  // Its transfers per micro-batch: activations forward and gradients backward across its cuts.
  double transfer_s(int i, int j, int s) const;
  double time_s(int i, int j, int s) const { return compute_s(i, j, s) + transfer_s(i, j, s); }

  double cut_bytes(int p) const;  // per micro-batch, at position p (a tensor-parallel group's whole tensor)
  // Tensor parallelism: the time of the layers' collectives inside one
  // micro-batch's forward and backward (already in the actions' times), and
  // what one all-reduce of `bytes` over the group's T devices takes: a ring,
  // 2(T-1) · (latency + bytes / (T · bandwidth)) on the link each ring step
  // crosses (Topology::group_ring_link: inside a node, each device's NVSwitch
  // port, which is non-blocking), or a tree on group_tree_link, as the
  // request's collective says (auto: the faster; sequence parallelism's
  // all-gathers and reduce-scatters are rings).
  double tp_collective_s(int i, int j, int s) const;
  // Of those, one micro-batch's forward's (a recompute's too) and backward's.
  double tp_forward_s(int i, int j) const { return tp_forward_[j] - tp_forward_[i]; }
  double tp_backward_s(int i, int j) const { return tp_backward_[j] - tp_backward_[i]; }
  // Expert parallelism: a mixture's all-to-alls (dispatch and combine) in
  // one forward of layers [i, j) on stage s's device, the same in an input
  // gradient (already in the actions' times); and in what R runs.
  double a2a_pass_s(int i, int j, int s) const { return sum(a2a_, i, j, s); }
  double a2a_recompute_s(int i, int j, int s) const;
  // The same as messages (sim/): how many a pass of layers [i, j) runs (R:
  // of what it re-runs), and the busiest device's bytes in each (the mean).
  struct Exchanges { int count = 0; double bytes = 0; };
  Exchanges expert_exchanges(int i, int j) const;
  Exchanges recompute_exchanges(int i, int j) const;
  double tp_allreduce_s(double bytes) const;
  Collective tp_allreduce_algorithm(double bytes) const;
  const std::vector<Collective>& tp_algorithms() const { return tp_used_; }  // those the layers' collectives use
  // Data parallelism: the algorithm of stage s's all-reduce over its data
  // group (the request's, or with auto the faster closed form on
  // data_group_link; ZeRO-1's reduce-scatter is a ring); the collective that
  // its REDUCE_GRAD runs (the ring or tree all-reduce, ZeRO-1's ring
  // reduce-scatter), and the chunks it pipelines its bytes in (the tree's;
  // 1 for a ring). A group's T devices reduce their shares side by side:
  // T · reduce_bytes on the group's merged route.
  Collective reduce_algorithm(int i, int j, int s) const;
  CollectiveAlgorithm reduce_collective(int i, int j, int s) const;
  int reduce_chunks(int i, int j, int s) const;
  int tensor_parallel() const { return tensor_parallel_; }
  // Data parallelism: the bytes one device of stage s all-reduces over its
  // data group per step (its share of the stage's gradients), and with ZeRO-1
  // the weights it all-gathers after its step.
  double reduce_bytes(int i, int j) const;
  double gather_bytes(int i, int j) const;
  // ZeRO-3 without resharding after the forward: what one device gathers at
  // an UNSHARD of the stage (its weights, whole), and what they hold beyond
  // their shard while gathered (every version kept). 0 otherwise: an UNSHARD
  // is then a no-op in time, and the weights stay as static_bytes counts them.
  double unshard_bytes(int i, int j) const;
  double gathered_weight_bytes(int i, int j, int s) const;
  // The gradient buckets' size (PartitionRequest::gradient_bucket_bytes; 0:
  // one reduction). Under ZeRO-2 and 3, where none is asked, each layer's
  // gradients are reduce-scattered as its backward produces them (a bucket of
  // the stage's largest layer).
  double gradient_bucket_bytes(int i, int j) const;
  double gradient_bucket_bytes() const { return gradient_bucket_bytes_; }
  // ZeRO-2, and ZeRO-3 resharding after the forward: every micro-batch's
  // backward reduce-scatters its gradients (not one reduction after the last).
  bool reduces_each_microbatch() const { return shards_gradients(); }
  int zero() const { return zero_; }
  // ZeRO-3: what the all-gathers of the weights add to one `op` (F, R, B or
  // I) of stage s: its layers as FSDP2's units (a layer with weights, and the
  // weightless ones after it), each unit's ring all-gather over the data
  // group issued when the one before it starts computing (one ahead), one
  // gather at a time (prefetched_pass_s). 0 for W (a weight gradient needs
  // no weights) and below ZeRO-3.
  double gather_exposed_s(int i, int j, int s, schedule::Op op) const;
  // One layer's weights all-gathered over stage s's data group (a ring; a
  // tensor group's T shares side by side on the group's merged route).
  double layer_gather_s(int l, int s) const;
  double gradient_first_bucket_bytes() const { return gradient_first_bucket_bytes_; }
  std::int64_t params(int i, int j) const { return static_cast<std::int64_t>(params_[j] - params_[i]); }
  // Weights (+ fp32 master copy in half precision) per weight version, gradients,
  // optimizer state, the schedule's peak of whole stashed micro-batches and of
  // checkpointed stage inputs.
  double memory_bytes(int i, int j, int s) const;
  // Its parts at the stage's peak: the weights (every version kept), the
  // gradients, the optimizer state (fp32 master copy and moments, sharded
  // under ZeRO-1), the stashed activations, a backward's workspace and the
  // device's reserve on the sum of the others.
  struct MemoryParts {
    double weights = 0, gradients = 0, optimizer = 0, activations = 0, workspace = 0, reserve = 0;
    double total() const { return weights + gradients + optimizer + activations + workspace + reserve; }
  };
  MemoryParts memory_parts(int i, int j, int s) const;
  // Its parts: what does not depend on the micro-batches in flight, one whole
  // stashed micro-batch, one checkpointed stage input.
  double static_bytes(int i, int j, int s) const;
  double activation_bytes(int i, int j) const;
  // A stashed micro-batch's bytes in the stash's two states: whole (never
  // checkpointed, or re-materialized for its backward) and checkpointed.
  // For the whole stage these are activation_bytes and input_bytes; by layer
  // a checkpointed micro-batch keeps each group's input and the layers it
  // does not recompute, and a re-materialized one adds its largest group.
  double whole_stash_bytes(int i, int j) const;
  double checkpoint_stash_bytes(int i, int j) const;
  // What a micro-batch keeps between its I and its W (deferred weight gradients).
  double weight_grad_bytes(int i, int j) const;
  // The largest working memory of a backward of one of the layers [i, j);
  // under ZeRO-2 and 3, with the layer's gradients held whole until
  // reduce-scattered, and under ZeRO-3 two layers' weights gathered (the
  // one computing and the one prefetched); under FP8, the FP8 copies of the
  // layer computing's matrices.
  double workspace_bytes(int i, int j) const;
  // The stage input one device keeps: split over T with sequence parallelism.
  double input_bytes(int i) const { return cut_bytes(i) / (sequence_parallel_ ? tensor_parallel_ : 1); }
  double capacity_bytes(int s) const { return device_of(s).memory_bytes; }
  const schedule::StageMemory& stash(int s) const { return stash_counts_.at(s); }

 private:
  double sum(const std::vector<std::vector<double>>& prefix, int i, int j, int s) const {
    const auto& p = prefix[rank_of(s)];
    return p[j] - p[i];
  }
  void init_tensor_parallel(double microbatch_size);
  // Each rank's data group's links: the whole group's, ZeRO's shard
  // group's, and with C or E > 1 its context and expert groups'.
  void init_group_links(int K);
  void check_fp8() const;  // an FP8 model needs every device's FP8 rate
  // Context parallelism: the exposed time of layer l's keys and values
  // passed around rank k's group of C (a ring under the attention of the
  // block held, or all-gathered first), in its forward and its backward.
  // `fused`: the layer's core at the kernel's rates (fused_core_s), or {0, 0}.
  std::pair<double, double> context_exchange_s(int k, int l, std::pair<double, double> fused) const;
  void check_context(const Model& m) const;
  // Expert parallelism: one dispatch's (or combine's) all-to-all of layer l
  // over rank k's expert group, the busiest device's share (0: none).
  double expert_exchange_s(int k, int l) const;
  double expert_exchange_bytes(int l) const;  // what the busiest device sends in it (0: none)
  void check_experts(const Model& m) const;
  // Layer l's expert extras on the busiest device of an expert group: the
  // load beyond the mean (expert_load - 1; 0 with E = 1).
  double expert_extra(int l) const;
  // The bytes of weights a pass of layer l reads on one device: its share
  // under tensor parallelism, its 1/E of a mixture's experts; an embedding
  // gathers rows, not its whole table (pass_weight_bytes).
  double pass_weights(int l) const;
  // Layer l's attention core on rank k for one micro-batch, forward and
  // backward seconds at the device's fused kernel rates (Device::attention):
  // its share of the heads (1/T) over its 1/C of the sequence; {0, 0} where
  // they do not apply (no rates, no fused kernel, fp32, a calibrated kind:
  // the core is then timed with the layer's products).
  std::pair<double, double> fused_core_s(int k, int l) const;
  // Rank k's prefix sums of every pass's time over the layers, micro-batch size b.
  void time_layers(int k, double b);
  // Each layer's memory per device of the group: params_, stashed_, weight_grad_stash_, workspace_.
  void size_layers();
  double action(Pass pass, int i, int j, int s) const { return j > i ? device_of(s).action_overhead.of(pass) : 0; }

  const Model& model_;
  const Hardware& hardware_;
  // Samples' worth of tokens one device holds per micro-batch: b, or b / C
  // under context parallelism (1/C of every sample's sequence).
  double microbatch_size_ = 1;
  int context_ = 1;              // Program::context_parallel
  bool context_all_gather_ = false;
  std::vector<Link> context_links_;  // [rank]: its context group's (data_subgroup_link), with C > 1
  // Expert parallelism: the replicas an expert group spans
  // (Program::expert_replicas), the devices it spans (Program::expert_parallel),
  // and whether it folds the tensor group in (ETP 1: the experts whole on
  // each device, the tokens each device holds exchanged by it alone).
  int expert_ = 1, experts_total_ = 1;
  bool fold_experts_ = false;
  std::vector<AllToAll> expert_links_;    // [rank]: its expert group's all-to-all, with E > 1
  Optimizer optimizer_ = Optimizer::Adam;
  schedule::RecomputePolicy recompute_policy_ = schedule::RecomputePolicy::None;
  bool checkpoints() const {
    return recompute_policy_ == schedule::RecomputePolicy::Full || recompute_policy_ == schedule::RecomputePolicy::ExceptLast;
  }
  LayerCheckpoint checkpoint_;
  // By layer: the first recomputable layer at or after p, and one past the
  // last recomputable layer before p ([p] for p in 0..n).
  std::vector<int> first_recomputable_, end_recomputable_;
  double stash_range_bytes(int i, int j) const;  // layers [i, j)' own stash, one micro-batch
  std::vector<int> stage_rank_;  // [stage]
  std::vector<Device> devices_;
  std::vector<std::vector<double>> forward_, input_grad_, weight_grad_, forward_nograd_, recompute_;  // [rank][position]
  std::vector<std::vector<double>> a2a_;  // [rank][position]: prefix sums of one pass's all-to-alls
  std::vector<double> params_, stashed_, weight_grad_stash_;  // per device of a tensor-parallel group
  // Of the parameters, per device: those ZeRO divides over its shards (a
  // mixture's experts over the shards outside their expert group), and
  // those whose gradients the data group's collectives carry, an expert's
  // weighted by its smaller group's ring (reduced over D / E replicas, not
  // D: ((D/E - 1)/(D/E)) / ((D - 1)/D) of its bytes on the data group's
  // ring). Both params_ without experts.
  std::vector<double> zero_params_, comm_params_;
  std::vector<double> workspace_;                            // per layer and sample, per device
  std::vector<double> tp_forward_, tp_backward_;  // prefix sums of the layers' collective seconds per micro-batch
  Collective collective_ = Collective::Auto;
  std::vector<Collective> tp_used_;
  std::vector<Link> data_links_, shard_links_;  // [rank]: data_group_link, and its shard group's, with D > 1
  int tensor_parallel_ = 1, data_parallel_ = 1, shard_ = 1;  // shard_: ZeRO's, Program::shard_degree
  bool sequence_parallel_ = false;
  int zero_ = 0;                      // Program::zero
  bool reshard_after_forward_ = true;  // Program::reshard_after_forward
  // ZeRO-3 with its weights freed after each use; its gradients sharded (ZeRO-2, or that).
  bool shards_weights() const { return zero_ == 3 && reshard_after_forward_; }
  // ZeRO-3 over D > 1 keeping the weights between uses: where UNSHARD gathers and RESHARD frees.
  bool keeps_gathered() const { return zero_ == 3 && !reshard_after_forward_ && data_parallel_ > 1; }
  bool shards_gradients() const { return zero_ == 2 || shards_weights(); }
  double layer_pass_s(schedule::Op op, int l, int s, bool nograd) const;
  double gradient_bucket_bytes_ = 0;
  double gradient_first_bucket_bytes_ = 0;
  std::vector<std::int64_t> cut_;
  std::vector<schedule::StageMemory> stash_counts_;
};

}  // namespace pipetwin::models
