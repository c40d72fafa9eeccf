// The schedule IR: per-rank ordered action lists plus everything needed to
// interpret them (shape, stage -> rank map, partition, recompute policy).
//
//   rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 ... 0RECV_B0 0B0 ... 0STEP
//   rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 ...
//
// The order carries no timing and no bubbles: time belongs to a Timeline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schedule/action.hpp"

namespace pipetwin::schedule {

// torchgpipe's checkpoint modes: `full` recomputes every micro-batch of every
// stage, `except-last` every micro-batch but the last (whose backward follows
// its forward closely), `none` stashes all activations. `selective`
// (Megatron-LM's, Korthikanti et al. 2022) checkpoints no micro-batch: each
// layer re-runs its attention core inside its own backward, which the cost
// model times and whose stash it drops (models/recompute.hpp); the schedule
// holds no R action for it. How much of a checkpointed micro-batch is kept
// and re-run (the whole stage, or layer by layer as Megatron-LM and
// torchtitan do) is the cost model's too: the IR only says which
// micro-batches are checkpointed.
enum class RecomputePolicy { None, Full, ExceptLast, Selective };

std::string_view recompute_name(RecomputePolicy policy);
RecomputePolicy parse_recompute(std::string_view name);  // throws pipetwin::Error
const std::vector<std::string>& recompute_names();     // the allowed values, in order

// The most stages (K x V, so also ranks) a Program may have: the readers and
// the validator refuse more before anything is sized by it.
inline constexpr int kMaxStages = 1'000'000;
// The most (stage, micro-batch) pairs a generated schedule may hold (K x V x M):
// each is a few actions on every pass over the schedule.
inline constexpr std::int64_t kMaxStageMicrobatches = 10'000'000;

// The most tensor-parallel (T) or data-parallel (D) degree a Program may name.
inline constexpr int kMaxParallel = 1'000'000;

// Layers [begin, end) of the model's layer sequence held by one stage.
struct LayerRange {
  int begin = 0;
  int end = 0;
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};

struct Program {
  std::string schedule;         // generator name, or "imported"
  int num_ranks = 1;            // K
  int stages_per_rank = 1;      // V
  int num_microbatches = 1;     // M (for `pipedream`: mini-batches in the window)
  std::vector<RankId> stage_to_rank;      // size S
  std::vector<LayerRange> partition;      // size S, or empty when not yet partitioned
  RecomputePolicy recompute = RecomputePolicy::None;
  std::vector<int> weight_versions;       // size S; > 1 only for weight stashing
  std::vector<std::vector<Action>> ranks; // size K, the per-rank action lists
  // Around the pipeline (Megatron-LM's layout, ranks (d, k, t)): each of the
  // K pipeline ranks above is a tensor-parallel group of T devices that split
  // every layer (and run its collectives), and the whole pipeline is one of D
  // data-parallel replicas that each take batch / D and reduce a stage's
  // gradients over their data group (REDUCE_GRAD). Every replica and every
  // device of a group runs the same action list. T = D = 1: a pipeline alone.
  int tensor_parallel = 1;      // T
  int data_parallel = 1;        // D
  bool sequence_parallel = false;  // Korthikanti et al.: norms and dropout split over T too
  // ZeRO's stage over the data group (Rajbhandari et al. 2020): 0 none; 1
  // the optimizer state (and fp32 master copy) sharded: one reduce-scatter
  // of the gradients after the last backward, the step on the shard, an
  // all-gather of the weights after it; 2 the gradients too: each
  // micro-batch's gradients reduce-scattered as its backward produces them
  // (DeepSpeed's stage 2); 3 the weights too, as FSDP2 runs it: each unit (a
  // layer) all-gathered before its forward and its backward, prefetched one
  // unit ahead, and its gradients reduce-scattered per micro-batch. With
  // reshard_after_forward off (torchtitan's choice under a pipeline) a
  // stage's weights are gathered once per step before its first forward and
  // kept to the end of its last backward, whose gradients (accumulated whole)
  // are reduce-scattered unit by unit.
  int zero = 0;
  bool reshard_after_forward = true;  // ZeRO-3 only
  // HSDP: ZeRO's shards over groups of this many consecutive replicas (which
  // divides D), replicated across the D / G groups: a gradient reduction is a
  // reduce-scatter inside the group, then an all-reduce of its 1/G across the
  // groups; gathers stay inside the group. 0: one group of all D.
  int shard_group = 0;
  // Context parallelism: of the D replicas, groups of this many consecutive
  // ones (which divides D) split each sample's sequence into load-balanced
  // causal chunks rather than take samples of their own: each holds 1/C of
  // every micro-batch's tokens and passes keys and values around the group
  // in each attention. D counts them all (every replica of the weights,
  // which reduce their gradients together): D / C groups take batch / (D /
  // C) samples each. 1: none.
  int context_parallel = 1;
  // Expert parallelism: of the D replicas, groups of this many consecutive
  // ones (which divides D) split a mixture of experts' routed experts among
  // them, each holding 1/E of every such layer's experts, and trade tokens
  // by all-to-all (dispatch before the experts, combine after); the rest of
  // the weights stays replicated over D, the experts' over the D / E groups.
  // 1: none. With expert_tensor_parallel 1 under T > 1 (Megatron-LM's MoE
  // parallel folding, ETP 1), the experts are not split by their matrices
  // over the tensor group but spread over its devices too: E is then a
  // multiple of T, E / T replicas (which divide D) times T devices each.
  int expert_parallel = 1;
  // The experts' tensor-parallel degree: 0 (the tensor group's T, Megatron-LM's
  // default) or 1.
  int expert_tensor_parallel = 0;
  bool folds_experts() const { return expert_parallel > 1 && expert_tensor_parallel == 1 && tensor_parallel > 1; }
  // The replicas an expert group spans: E, or E / T where it folds the tensor group in.
  int expert_replicas() const { return folds_experts() ? expert_parallel / tensor_parallel : expert_parallel; }
  bool shard_optimizer() const { return zero >= 1; }
  int data_groups() const { return data_parallel / context_parallel; }  // D / C: the replicas that take samples
  int shard_degree() const { return shard_group > 0 ? shard_group : data_parallel; }

  int num_stages() const { return num_ranks * stages_per_rank; }
  // Devices in all: T x K x D.
  std::int64_t num_devices() const {
    return static_cast<std::int64_t>(tensor_parallel) * num_ranks * data_parallel;
  }
  // The first device of replica d's group at pipeline rank k, Megatron-LM's
  // order (device t + T (d + D k)); validate() keeps T x K x D within an int.
  int first_device(int replica, RankId rank) const {
    return tensor_parallel * (replica + data_parallel * rank.value);
  }
  bool is_pipeline_only() const {
    return tensor_parallel == 1 && data_parallel == 1 && !sequence_parallel && zero == 0 && context_parallel == 1 &&
           expert_parallel == 1;
  }
  RankId rank_of(StageId stage) const { return stage_to_rank.at(stage.value); }
  std::vector<StageId> stages_of(RankId rank) const;
  bool is_last_stage(StageId stage) const { return stage.value == num_stages() - 1; }
  // True when micro-batch `mb` of `stage` is recomputed before its backward.
  bool recomputes(StageId stage, MicrobatchId mb) const;
  // True when some rank holds a SEND_* or RECV_* action.
  bool has_transfers() const;
  // True when it names no recompute policy and holds no R action: a schedule
  // file (a PyTorch CSV never has one) that leaves recompute to the run's option.
  bool leaves_recompute_open() const;
  std::size_t num_actions() const;

  friend bool operator==(const Program&, const Program&) = default;
};

// A Program with the given shape, the loop stage -> rank map (stage s on rank
// s mod K), no partition, one weight version per stage and empty action lists.
Program make_program(std::string schedule, int ranks, int stages_per_rank, int microbatches,
                     RecomputePolicy recompute);

}  // namespace pipetwin::schedule
