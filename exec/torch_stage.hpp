// One pipeline stage as LibTorch state (internal to exec/: includes
// LibTorch): its layers' parameters, its optimizer, the tensors that cross
// its cuts, and, for weight stashing (PipeDream), its weight versions.
//
//   cut before `begin`                          cut after `end`
//   every tensor produced before the stage  --> [ layers begin..end-1 ] -->  every tensor produced before
//   and consumed inside or after it                                           `end` and consumed after it
//
// A tensor that only passes through (a skip across the stage) is forwarded.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "exec/torch_moe.hpp"
#include "exec/torch_tensor_parallel.hpp"
#include "models/model.hpp"
#include "models/partition.hpp"
#include "models/recompute.hpp"
#include "schedule/program.hpp"

namespace pipetwin::exec {

struct CutTensor {
  int producer = -1;  // layer index; -1 = the model input
  std::vector<std::int64_t> shape;  // per sample
  at::ScalarType dtype = at::kFloat;
  bool grad = true;  // a gradient flows back through it
};
// The tensors crossing the cut before layer `position` (0 < position < n);
// with sequence parallelism over `sequence_split` members, an activation's
// first per-sample dimension (the sequence) is the member's 1/split of it.
std::vector<CutTensor> cut_tensors(const models::Model& model, int position, int sequence_split = 1);

using Params = std::vector<std::vector<at::Tensor>>;  // per layer of the stage

// Called around each layer of a stage's forward (ZeRO-3 gathers a layer's
// weights before it and frees them after, exec/torch_zero.hpp). `position`:
// the layer's place in the stage.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before(int position) = 0;
  virtual void after(int position, const at::Tensor& output) = 0;
};

// The optimizer `kind` over `params` (the same hyper-parameters everywhere).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(models::Optimizer kind, std::vector<at::Tensor> params, double lr);

// Mixed precision as Megatron-LM and DeepSpeed train 16-bit models (and as
// the stage memory model counts them: 16-bit weights and gradients, an fp32
// master copy, fp32 optimizer states): the optimizer steps fp32 masters of
// the weights, one tensor at a time (so that only one tensor's gradient is
// ever held in fp32), and the 16-bit weights are rounded from them. An fp32
// model steps its weights directly.
class MasterOptimizer {
 public:
  MasterOptimizer(models::Optimizer kind, std::vector<at::Tensor> params, double lr);
  // Steps with each parameter's gradient (its .grad()), then clears it.
  void step();

 private:
  std::vector<at::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> direct_;                 // fp32 weights
  std::vector<at::Tensor> masters_;                                 // 16-bit weights: fp32 copies
  std::vector<std::unique_ptr<torch::optim::Optimizer>> per_master_;
};

class Stage {
 public:
  // With a tensor-parallel group (T > 1), the stage holds this member's
  // shards of its layers (Megatron-LM's split, exec/torch_tensor_parallel.hpp);
  // with an expert-parallel group (E > 1), its routed blocks hold this
  // member's experts only (exec/torch_moe.hpp).
  Stage(const models::Model& model, int index, schedule::LayerRange layers, bool last, int weight_versions,
        std::uint64_t seed, at::Device device, models::Optimizer optimizer, double lr, TpGroup tensor_group = {},
        bool sequence_parallel = false, ExpertGroup expert_group = {});

  int index() const { return index_; }
  const models::Model& model() const { return model_; }
  schedule::LayerRange layers() const { return layers_; }
  // The live weights, by position in the stage (the tensors autograd sees).
  const Params& live() const { return live_; }
  bool first() const { return layers_.begin == 0; }
  bool last() const { return last_; }
  const std::vector<CutTensor>& in_cut() const { return in_cut_; }
  const std::vector<CutTensor>& out_cut() const { return out_cut_; }
  // True when output i is also read by a layer of this stage (autograd may
  // then hold the very tensor: its data must stay).
  bool output_read_inside(std::size_t i) const { return read_inside_.at(i); }

  // Recompute inside the stage (exec/torch_checkpoint.hpp): `selective`
  // checkpoints every attention core of its forwards; a `checkpoint` by
  // layer (uniform:N, block:N) the groups of layers it names, in the
  // forwards that ask for them.
  void set_recompute(bool selective, const models::LayerCheckpoint& checkpoint);

  // The stage's forward: its cut's outputs, or {loss} on the last stage.
  // `layer_checkpoints`: the groups set_recompute named run checkpointed.
  std::vector<at::Tensor> forward(const std::vector<at::Tensor>& inputs, const Params& params,
                                  const at::Tensor& targets, LayerHooks* hooks = nullptr,
                                  bool layer_checkpoints = false) const;

  // A new micro-batch's forward takes the current weight version; its
  // recompute and backward use params() of that same version: the live
  // weights, or (weight stashing) a copy kept while a micro-batch holds it.
  int acquire();
  const Params& params(int version);
  // After a micro-batch's backward: fold its version's gradients into the
  // live weights; the version is dropped when no micro-batch holds it.
  void release(int version);
  int peak_versions() const { return peak_versions_; }

  // Before the gradients leave the backward passes (REDUCE_GRAD or STEP):
  // with sequence parallelism, the replicated parameters' gradients summed
  // over the tensor group (a collective; once per step, later calls no-ops).
  void finish_gradients();
  void step();  // optimizer step, gradients cleared, version + 1
  // The live weights (every layer's, in order), for a data group's reduction.
  std::vector<at::Tensor> parameters() const;
  // Split over an expert group (E > 1): the routed experts this member holds,
  // and every other weight, each in order (parameters() has both).
  std::vector<at::Tensor> routed_experts() const;
  std::vector<at::Tensor> replicated() const;
  // Bytes of the live weights' gradients now.
  std::int64_t grad_bytes() const;
  // After the caller updated the live weights itself (ZeRO-1): gradients
  // cleared, version + 1, as step().
  void advance();
  bool versioned() const { return versioned_; }
  // ZeRO-2 and 3: the data group's shards hold the optimizer's state; the
  // stage's own (an fp32 copy of 16-bit weights) is let go.
  void drop_optimizer() { optimizer_.reset(); }
  // Every layer's full parameters as CPU tensors, by layer index (T > 1: a
  // collective of the tensor group, gathering the shards).
  std::map<int, std::vector<at::Tensor>> weights() const;

 private:
  using Values = std::unordered_map<int, at::Tensor>;  // by layer (-1: the model input)
  // Layer l on `values`, `hooks` (or null) around it.
  at::Tensor run_layer(int l, const Values& values, const Params& params, const at::Tensor& targets,
                       LayerHooks* hooks) const;
  // Layers [a, e) as one checkpoint: their outputs read after e into
  // `values`. `hooks` run around each layer of both its runs (ZeRO-3 gathers
  // the weights for the re-run inside the backward too).
  void run_group(int a, int e, Values& values, const Params& params, const at::Tensor& targets, LayerHooks* hooks) const;

  const models::Model& model_;
  int index_;
  schedule::LayerRange layers_;
  bool last_;
  bool versioned_;
  std::vector<CutTensor> in_cut_, out_cut_;
  TpGroup tp_;
  bool sequence_parallel_ = false;
  ExpertGroup experts_;
  std::vector<bool> read_inside_;
  bool selective_ = false;
  std::map<int, int> groups_;  // layer checkpoints: first layer -> one past the last
  Params live_;
  std::unique_ptr<MasterOptimizer> optimizer_;
  bool gradients_finished_ = false;
  int version_ = 0;
  std::map<int, Params> versions_;  // weight stashing: version -> detached copies
  std::map<int, int> users_;        // version -> micro-batches holding it
  int peak_versions_ = 1;
};

}  // namespace pipetwin::exec
