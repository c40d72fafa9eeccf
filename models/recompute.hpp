// A recompute choice as the command line and the sweeps spell it: which
// micro-batches a schedule checkpoints (the Program's RecomputePolicy) and
// what a checkpointed micro-batch keeps and re-runs (the cost model's).
//
//   none          every activation kept
//   full          torchgpipe: a checkpointed micro-batch keeps its stage's
//                 input; its R re-runs the whole stage, output head included,
//                 and re-materializes all of it before its backward (what
//                 pipetwin's executor runs)
//   except-last   as full, all micro-batches but the last
//   selective     Megatron-LM's selective recompute: every layer keeps all
//                 but its attention core, which it re-runs in its backward
//   uniform[:N]   Megatron-LM's --recompute-granularity full
//                 --recompute-method uniform --recompute-num-layers N (N = 1:
//                 torchtitan's activation_checkpoint.mode = "full"): the
//                 stage's layers in groups of N, each group keeping its input
//                 only and re-materialized one group at a time in the
//                 backward
//   block:N       --recompute-method block: the first N layers of each stage
//                 each keep their input only; the rest keep everything
//   op            torchtitan's activation_checkpoint.mode = "selective" with
//                 selective_ac_option = "op": every block keeps its input,
//                 its attention kernel's output and every other matrix
//                 product's output, and re-runs the rest in its backward
//                 (LayerCost::op_saved_elems); llm family only
// In uniform and block the embedding, the output head and the loss are never
// recomputed (neither framework checkpoints them): they keep their stash.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "schedule/program.hpp"

namespace pipetwin::models {

enum class Checkpoint { Stage, Uniform, Block, Op };

// How a checkpointed micro-batch is re-materialized: the whole stage at
// once, or layer groups (the PartitionRequest's; Stage for none and
// selective), or per operator inside each layer (Op, with the policy
// Selective: no R action).
struct LayerCheckpoint {
  Checkpoint method = Checkpoint::Stage;
  int layers = 0;  // N: uniform's group size, block's layers per stage
  bool by_layer() const { return method == Checkpoint::Uniform || method == Checkpoint::Block; }
  // Layers per checkpoint by layer: uniform's N, block's 1 (each of its N alone).
  int group_size() const { return method == Checkpoint::Uniform ? layers : 1; }
  bool by_op() const { return method == Checkpoint::Op; }
  friend bool operator==(const LayerCheckpoint&, const LayerCheckpoint&) = default;
};

struct RecomputeChoice {
  schedule::RecomputePolicy policy = schedule::RecomputePolicy::None;
  LayerCheckpoint checkpoint;
};

// Throws pipetwin::Error naming the word and every valid spelling.
RecomputeChoice parse_recompute_choice(std::string_view text);
std::string recompute_choice_name(const RecomputeChoice& choice);
// The valid spellings, for help texts: "none, full, except-last, selective, uniform[:N], block:N, op".
std::string recompute_choices();

struct Model;
// Under uniform or block, the layers [first, end) of the stage [i, j) that
// are checkpointed (the embedding, the output head and the loss never are);
// {i, i} where none is, and [i, j) for the other methods. Uniform groups them
// by `layers` from `first`; block checkpoints each of them alone.
std::pair<int, int> recomputed_layers(const Model& model, const LayerCheckpoint& checkpoint, int i, int j);

}  // namespace pipetwin::models
