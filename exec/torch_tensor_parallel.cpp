// Tensor parallelism: the collectives as autograd functions, the split of
// the Transformer family's parameters, their sharded forwards and the gather
// of the full parameters.
//
// ProcessGroupGloo (torch 2.13) runs every collective used here on CPU
// tensors: all-reduce (sum, max), all-gather and reduce-scatter (both the
// list forms, used here, and the flat _allgather_base / _reduce_scatter_base),
// so no collective is emulated.
#include "exec/torch_tensor_parallel.hpp"

#include <torch/autograd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>

#include "exec/torch_checkpoint.hpp"
#include "exec/torch_layers.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

using models::LayerKind;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// --- Plain collectives (no autograd); a null group is a group of one.

std::atomic<std::int64_t> collective_ns{0};

// Adds the time from its construction to its end to collective_ns.
class CollectiveTimer {
 public:
  CollectiveTimer() : start_(std::chrono::steady_clock::now()) {}
  ~CollectiveTimer() {
    collective_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  }
  CollectiveTimer(const CollectiveTimer&) = delete;
  CollectiveTimer& operator=(const CollectiveTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

at::Tensor all_reduce(const at::Tensor& x, const TpGroup& g, c10d::ReduceOp op = c10d::ReduceOp::SUM) {
  if (!g) return x;
  const CollectiveTimer timer;
  std::vector<at::Tensor> v{x.clone(at::MemoryFormat::Contiguous)};  // never the caller's tensor in place
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  g->allreduce(v, o)->wait();
  return v[0];
}

at::Tensor all_gather(const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
  if (!g) return x;
  const CollectiveTimer timer;
  std::vector<at::Tensor> in{x.contiguous()};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int i = 0; i < g->getSize(); ++i) out[0].push_back(at::empty_like(in[0]));
  g->allgather(out, in)->wait();
  return at::cat(out[0], dim);
}

void check_divides(const at::Tensor& x, std::int64_t dim, int T, const char* what) {
  if (x.size(dim) % T != 0) {
    throw Error(std::string("tensor parallelism: ") + what + " needs dimension " + std::to_string(dim) + " (size " +
                std::to_string(x.size(dim)) + ") to divide by T = " + std::to_string(T));
  }
}

at::Tensor reduce_scatter(const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
  if (!g) return x;
  check_divides(x, dim, g->getSize(), "a reduce-scatter");
  const CollectiveTimer timer;
  std::vector<std::vector<at::Tensor>> in(1);
  for (const auto& c : x.chunk(g->getSize(), dim)) in[0].push_back(c.clone(at::MemoryFormat::Contiguous));
  std::vector<at::Tensor> out{at::empty_like(in[0][g->getRank()])};
  g->reduce_scatter(out, in)->wait();
  return out[0];
}

at::Tensor own_chunk(const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
  if (!g) return x;
  check_divides(x, dim, g->getSize(), "a split");
  return x.chunk(g->getSize(), dim)[g->getRank()].clone(at::MemoryFormat::Contiguous);
}

// The group rides in the autograd context as a capsule (c10d::Backend is a
// CustomClassHolder), so backward runs its collective on the same group.
void keep(AutogradContext* ctx, const TpGroup& g, std::int64_t dim = 0) {
  if (g) ctx->saved_data["group"] = at::IValue::make_capsule(g);
  ctx->saved_data["dim"] = dim;
}

TpGroup group_of(AutogradContext* ctx) {
  const auto it = ctx->saved_data.find("group");
  if (it == ctx->saved_data.end()) return {};
  const auto holder = it->second.toCapsule();  // holds a reference while reclaim_copy() takes one
  return TpGroup::reclaim_copy(static_cast<c10d::Backend*>(holder.get()));
}

std::int64_t dim_of(AutogradContext* ctx) { return ctx->saved_data.at("dim").toInt(); }

// --- Autograd functions: backward returns one gradient per forward argument.

struct CopyFn : torch::autograd::Function<CopyFn> {  // f
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const TpGroup& g) {
    keep(ctx, g);
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduce(grads[0], group_of(ctx)), at::Tensor()};
  }
};

struct ReduceFn : torch::autograd::Function<ReduceFn> {  // g
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const TpGroup& g) {
    keep(ctx, g);
    return all_reduce(x, g);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], at::Tensor()}; }
};

struct GatherFn : torch::autograd::Function<GatherFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
    keep(ctx, g, dim);
    return all_gather(x, g, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scatter(grads[0], group_of(ctx), dim_of(ctx)), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterFn : torch::autograd::Function<ReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
    keep(ctx, g, dim);
    return reduce_scatter(x, g, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gather(grads[0], group_of(ctx), dim_of(ctx)), at::Tensor(), at::Tensor()};
  }
};

struct SplitFn : torch::autograd::Function<SplitFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
    keep(ctx, g, dim);
    return own_chunk(x, g, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gather(grads[0], group_of(ctx), dim_of(ctx)), at::Tensor(), at::Tensor()};
  }
};

// Megatron's: the global max and sum of exponentials, and the target's logit
// (found on the one member whose columns hold it), by three all-reduces; the
// gradient softmax - onehot is local to each member's columns.
struct VocabCrossEntropyFn : torch::autograd::Function<VocabCrossEntropyFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            const TpGroup& g) {
    const std::int64_t columns = logits.size(-1), start = tp_rank(g) * columns;
    const auto max = all_reduce(std::get<0>(logits.max(-1)), g, c10d::ReduceOp::MAX);
    const auto shifted = logits - max.unsqueeze(-1);
    const auto outside = (targets < start).logical_or(targets >= start + columns);
    const auto local = (targets - start).masked_fill(outside, 0);
    const auto target = all_reduce(shifted.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0), g);
    const auto log_sum = all_reduce(shifted.exp().sum(-1), g).log();
    // The softmax as log_softmax's backward forms it: exp(x - max - log Σ).
    ctx->save_for_backward({(shifted - log_sum.unsqueeze(-1)).exp(), local, outside});
    return log_sum - target;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &softmax = saved[0], &local = saved[1], &outside = saved[2];
    auto grad = softmax.clone();
    grad.scatter_add_(-1, local.unsqueeze(-1), outside.logical_not().to(grad.scalar_type()).neg().unsqueeze(-1));
    grad.mul_(grads[0].unsqueeze(-1));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int tp_size(const TpGroup& g) { return g ? g->getSize() : 1; }
int tp_rank(const TpGroup& g) { return g ? g->getRank() : 0; }
double tp_collective_seconds() { return 1e-9 * static_cast<double>(collective_ns.load()); }

at::Tensor tp_copy(const at::Tensor& x, const TpGroup& g) { return g ? CopyFn::apply(x, g) : x; }
at::Tensor tp_reduce(const at::Tensor& x, const TpGroup& g) { return g ? ReduceFn::apply(x, g) : x; }
at::Tensor sp_gather(const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
  return g ? GatherFn::apply(x, g, dim) : x;
}
at::Tensor sp_reduce_scatter(const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
  return g ? ReduceScatterFn::apply(x, g, dim) : x;
}
at::Tensor sp_split(const at::Tensor& x, const TpGroup& g, std::int64_t dim) {
  return g ? SplitFn::apply(x, g, dim) : x;
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, const TpGroup& g) {
  return VocabCrossEntropyFn::apply(logits, targets, g);
}


// --- Layers.
namespace {

std::string layer_label(const models::Layer& layer) {
  return "tensor parallelism: layer " + layer.name + " (" + std::string(models::kind_name(layer.kind)) + ")";
}

// Member t's part of one parameter (a contiguous copy).
at::Tensor take(const at::Tensor& full, TpSplit split, int T, int t) {
  switch (split) {
    case TpSplit::Replicated: return full.clone();
    case TpSplit::Rows: return full.chunk(T, 0)[t].clone(at::MemoryFormat::Contiguous);
    case TpSplit::Columns: return full.chunk(T, 1)[t].clone(at::MemoryFormat::Contiguous);
    case TpSplit::QkvRows: {
      auto sizes = full.sizes().vec();
      std::vector<std::int64_t> blocks{3, sizes[0] / 3};  // q, k, v
      blocks.insert(blocks.end(), sizes.begin() + 1, sizes.end());
      sizes[0] /= T;
      return full.view(blocks).chunk(T, 1)[t].clone(at::MemoryFormat::Contiguous).view(sizes);
    }
  }
  return {};
}

// The inverse of take() over the group.
at::Tensor put_together(const at::Tensor& mine, TpSplit split, const TpGroup& g) {
  switch (split) {
    case TpSplit::Replicated: return mine.clone();
    case TpSplit::Rows: return all_gather(mine, g, 0);
    case TpSplit::Columns: return all_gather(mine, g, 1);
    case TpSplit::QkvRows: {
      auto sizes = mine.sizes().vec();
      std::vector<std::int64_t> blocks{3, sizes[0] / 3};
      blocks.insert(blocks.end(), sizes.begin() + 1, sizes.end());
      sizes[0] *= tp_size(g);
      return all_gather(mine.view(blocks), g, 1).reshape(sizes);
    }
  }
  return {};
}

// Row-parallel: the partial product of the member's input columns, summed by
// g (or reduce-scattered into sequence chunks); the bias is added once, after
// the sum (a zero bias in the product, which needs no gradient, keeps
// exec::linear's deferred weight gradient).
at::Tensor row_parallel(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const TpGroup& g, bool sp) {
  const auto partial = linear(x, w, at::zeros({w.size(0)}, w.options()));
  return (sp ? sp_reduce_scatter(partial, g, 1) : tp_reduce(partial, g)) + bias;
}

// Into a column-parallel linear: f, or (sequence parallelism) the all-gather
// of the members' sequence chunks.
at::Tensor enter(const at::Tensor& h, const TpGroup& g, bool sp) { return sp ? sp_gather(h, g, 1) : tp_copy(h, g); }

// torch_layers.cpp's transformer_block on the member's heads and columns;
// with sequence parallelism, x and the result are the member's sequence chunk.
at::Tensor block(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p,
                 const TpGroup& g, bool sp) {
  const std::int64_t b = x.size(0), n = x.size(1) * (sp ? tp_size(g) : 1);
  const std::int64_t d = s.d_model, dh = d / s.heads, a = s.heads / tp_size(g);  // a: the member's heads
  auto h = at::layer_norm(x, {d}, p[0], p[1]);
  auto qkv = linear(enter(h, g, sp), p[2], p[3]).view({b, n, 3, a, dh}).permute({2, 0, 3, 1, 4});
  auto ctx = attention_core(qkv[0], qkv[1], qkv[2], scaled_softmax_core(dh)).transpose(1, 2).reshape({b, n, a * dh});
  auto x1 = x + row_parallel(ctx, p[4], p[5], g, sp);
  auto f = at::gelu(linear(enter(at::layer_norm(x1, {d}, p[6], p[7]), g, sp), p[8], p[9]));
  return x1 + row_parallel(f, p[10], p[11], g, sp);
}

// Vocabulary-parallel lookup: ids outside the member's rows give zeros; the
// all-reduce adds the one member's row (x + 0 is exact). With sequence
// parallelism: a reduce-scatter, and the positions of the member's chunk.
at::Tensor embedding(const at::Tensor& ids, const std::vector<at::Tensor>& p, const TpGroup& g, bool sp) {
  const std::int64_t rows = p[0].size(0), start = tp_rank(g) * rows;
  const auto outside = (ids < start).logical_or(ids >= start + rows);
  const auto mine = at::embedding(p[0], (ids - start).masked_fill(outside, 0)).masked_fill(outside.unsqueeze(-1), 0.0);
  if (sp) return sp_reduce_scatter(mine, g, 1) + p[1].chunk(tp_size(g), 0)[tp_rank(g)];
  return tp_reduce(mine, g) + p[1];
}

// The projection's vocabulary columns on this member, then Megatron's
// vocabulary-parallel cross-entropy (not an all-gather of the logits: no
// member ever holds [tokens, V]); the mean over the micro-batch's tokens.
at::Tensor head(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p,
                const at::Tensor& targets, const TpGroup& g, bool sp) {
  auto logits = linear(enter(at::layer_norm(x, {s.d_model}, p[0], p[1]), g, sp), p[2], p[3]);
  return vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}), g)
      .mean();
}

}  // namespace

std::vector<TpSplit> tp_splits(const models::Model& model, int index) {
  using S = TpSplit;
  const auto& layer = model.layers.at(index);
  switch (layer.kind) {
    case LayerKind::Embedding: return {S::Rows, S::Replicated};  // tokens by vocabulary; positions
    case LayerKind::TransformerBlock:
      return {S::Replicated, S::Replicated, S::QkvRows, S::QkvRows, S::Columns, S::Replicated,
              S::Replicated, S::Replicated, S::Rows,    S::Rows,    S::Columns, S::Replicated};
    case LayerKind::LmHead: return {S::Replicated, S::Replicated, S::Rows, S::Rows};
    default:
      throw Error(layer_label(layer) +
                  " is not split: Megatron-LM splits only the transformer family's embedding, blocks and head");
  }
}

void check_tensor_parallel(const models::Model& model, int index, int T, bool sequence_parallel) {
  const auto& layer = model.layers.at(index);
  if (T < 1) throw Error(layer_label(layer) + ": T must be at least 1, got " + std::to_string(T));
  if (T == 1) return;
  const auto need = [&](const char* field, std::int64_t value) {
    if (value % T != 0) {
      throw Error(layer_label(layer) + ": " + field + " = " + std::to_string(value) + " does not divide by T = " +
                  std::to_string(T) + " (each member takes an equal share)");
    }
  };
  if (sequence_parallel && layer.kind != LayerKind::LmHead) need("seq_len", layer.shape.seq_len);
  switch (layer.kind) {
    case LayerKind::Embedding:
    case LayerKind::LmHead: need("vocab", layer.shape.vocab); break;
    case LayerKind::TransformerBlock:
      need("heads", layer.shape.heads);
      need("d_ff", layer.shape.d_ff);
      break;
    default: tp_splits(model, index);  // throws: a kind that is not split
  }
}

std::vector<at::Tensor> shard_layer(const models::Model& model, int index, const std::vector<at::Tensor>& full, int T,
                                    int t) {
  check_tensor_parallel(model, index, T);
  std::vector<at::Tensor> out;
  if (T == 1) {
    for (const auto& p : full) out.push_back(p.clone());
    return out;
  }
  const auto splits = tp_splits(model, index);
  for (std::size_t i = 0; i < full.size(); ++i) out.push_back(take(full[i], splits.at(i), T, t));
  return out;
}

std::vector<at::Tensor> init_layer_shard(const models::Model& model, int index, std::uint64_t seed,
                                         const TpGroup& g) {
  return shard_layer(model, index, init_layer(model, index, seed), tp_size(g), tp_rank(g));
}

at::Tensor forward_layer_tp(const models::Model& model, int index, const std::vector<at::Tensor>& inputs,
                            const std::vector<at::Tensor>& shard, const at::Tensor& targets, const TpGroup& g,
                            bool sequence_parallel) {
  const bool sp = sequence_parallel && tp_size(g) > 1;
  check_tensor_parallel(model, index, tp_size(g), sp);
  const auto& s = model.layers.at(index).shape;
  switch (model.layers.at(index).kind) {
    case LayerKind::Embedding: return embedding(inputs.at(0), shard, g, sp);
    case LayerKind::TransformerBlock: return block(s, inputs.at(0), shard, g, sp);
    case LayerKind::LmHead: return head(s, inputs.at(0), shard, targets, g, sp);
    default: return forward_layer(model, index, inputs, shard, targets);  // T = 1 only (checked above)
  }
}

std::vector<at::Tensor> gather_layer(const models::Model& model, int index, const std::vector<at::Tensor>& shard,
                                     const TpGroup& g) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> out;
  if (tp_size(g) == 1) {
    for (const auto& p : shard) out.push_back(p.clone());
    return out;
  }
  const auto splits = tp_splits(model, index);
  for (std::size_t i = 0; i < shard.size(); ++i) out.push_back(put_together(shard[i], splits.at(i), g));
  return out;
}

void sum_replicated_grads(const models::Model& model, int index, const std::vector<at::Tensor>& shard,
                          const TpGroup& g) {
  if (tp_size(g) == 1) return;
  torch::NoGradGuard no_grad;
  const auto splits = tp_splits(model, index);
  for (std::size_t i = 0; i < shard.size(); ++i) {
    const at::Tensor& grad = shard[i].grad();
    if (splits.at(i) == TpSplit::Replicated && grad.defined()) grad.copy_(all_reduce(grad, g));
  }
}

}  // namespace pipetwin::exec
