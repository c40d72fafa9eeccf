// Megatron-LM tensor parallelism for the Transformer family's layers
// (internal to exec/: includes LibTorch). A group of T members (c10d
// backend, member t = its rank in the group) splits each layer's matrices;
// every member sees the whole activation between layers.
//
//   block:  x --LN--> f --[QKV: columns, by heads]--> attention of the
//           member's heads --[out proj: rows]--> g --> + bias --> + x = x1
//           x1 --LN--> f --[fc1: columns]--> gelu --[fc2: rows]--> g --> + bias --> + x1
//   embedding: ids --[vocabulary rows of the member, others masked to 0]--> g --> + positions
//   head:   x --LN--> f --[projection: vocabulary rows]--> vocab-parallel cross-entropy
//
//   f: identity forward, all-reduce of the gradient backward
//   g: all-reduce forward, identity backward
//
// Layer norms, positions and the biases added after g are replicated: their
// gradients come out equal on every member (with sequence parallelism, after
// sum_replicated_grads()).
// Parameters are made from the full layer's (seed, index) initialisation, so
// gather_layer() of the shards gives back exactly init_layer()'s tensors.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "models/model.hpp"

namespace pipetwin::exec {

// The tensor-parallel group; a null pointer is a group of one (T = 1).
using TpGroup = c10::intrusive_ptr<c10d::Backend>;
int tp_size(const TpGroup& group);
int tp_rank(const TpGroup& group);
// Seconds this process has spent in tensor-group collectives since it began
// (each from its call to its wait's return): the executor records each step's share.
double tp_collective_seconds();

// --- Autograd-aware collectives (every member must call them in the same order).
// Megatron's f: identity forward, gradient all-reduced (sum) backward.
at::Tensor tp_copy(const at::Tensor& x, const TpGroup& group);
// Megatron's g: all-reduce (sum) forward, identity backward.
at::Tensor tp_reduce(const at::Tensor& x, const TpGroup& group);
// Sequence parallelism, along `dim` (the sequence: 1 in [batch, seq, d]):
// all-gather forward / reduce-scatter backward, its conjugate, and the split
// (member t keeps chunk t forward / all-gather backward). `dim`'s size must
// divide by T for the reduce-scatter and the split.
at::Tensor sp_gather(const at::Tensor& x, const TpGroup& group, std::int64_t dim);
at::Tensor sp_reduce_scatter(const at::Tensor& x, const TpGroup& group, std::int64_t dim);
at::Tensor sp_split(const at::Tensor& x, const TpGroup& group, std::int64_t dim);

// Megatron's vocabulary-parallel cross-entropy: `logits` [N, V/T] are the
// member's vocabulary columns [t·V/T, (t+1)·V/T); `targets` [N] are global
// ids. Returns the per-token losses [N], the same on every member.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const TpGroup& group);

// --- Layers.
// How one parameter of a layer is split: whole on every member; by rows
// (dim 0) or columns (dim 1) in T equal chunks; QKV rows: [3·d, ...] as three
// blocks of d rows (q, k, v), each split by heads.
enum class TpSplit { Replicated, Rows, Columns, QkvRows };
// Per parameter of layer `index`, in init_layer()'s order.
std::vector<TpSplit> tp_splits(const models::Model& model, int index);

// Refuses (pipetwin::Error naming the layer and the field) a layer that T
// members cannot split: a kind Megatron does not split (when T > 1), heads,
// d_ff or vocab not divisible by T, or (sequence parallelism) seq_len.
void check_tensor_parallel(const models::Model& model, int index, int T, bool sequence_parallel = false);

// Member t's slices of layer `index`'s full parameters (as init_layer()
// returns them); contiguous copies.
std::vector<at::Tensor> shard_layer(const models::Model& model, int index, const std::vector<at::Tensor>& full, int T,
                                    int t);
// init_layer(model, index, seed), then this member's slices.
std::vector<at::Tensor> init_layer_shard(const models::Model& model, int index, std::uint64_t seed,
                                         const TpGroup& group);

// The forward of layer `index` on the member's shard: the same result as
// forward_layer() on the full parameters (the loss layer: the mean loss).
// With sequence parallelism (Korthikanti et al.), the tensors between layers
// are the member's chunk t of the sequence ([batch, seq/T, d]): the embedding
// (given all the ids) returns it, the head takes it (and all the targets);
// the f/g pairs become all-gather / reduce-scatter.
at::Tensor forward_layer_tp(const models::Model& model, int index, const std::vector<at::Tensor>& inputs,
                            const std::vector<at::Tensor>& shard, const at::Tensor& targets, const TpGroup& group,
                            bool sequence_parallel = false);
// Sequence parallelism: a replicated parameter (norms, the biases after g,
// positions) then sees only the member's tokens; sums its gradient over the
// group, in place, after backward (as Megatron does for those parameters).
// A collective; without sequence parallelism the gradients are equal already.
void sum_replicated_grads(const models::Model& model, int index, const std::vector<at::Tensor>& shard,
                          const TpGroup& group);

// The full tensors from every member's shard (all-gather; replicated ones
// from this member): the layer's parameters, or their gradients when given
// the shard's gradients. A collective: every member calls it.
std::vector<at::Tensor> gather_layer(const models::Model& model, int index, const std::vector<at::Tensor>& shard,
                                     const TpGroup& group);

}  // namespace pipetwin::exec
