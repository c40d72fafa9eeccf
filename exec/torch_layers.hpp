// The model's layers as LibTorch computations (internal to exec/: includes
// LibTorch). Layers are functional: parameters are tensors passed in, so a
// stage can run a forward on its live weights or on a stashed weight version
// (PipeDream), and linear layers can defer their weight gradient from I to W
// (zero-bubble schedules):
//
//   B:  grad_out --> [linear] --> grad_in, grad_W, grad_b          (both now)
//   I:  grad_out --> [linear] --> grad_in        queue += (grad_out, x)
//   W:                            queue.run() -> grad_W += grad_outᵀx, grad_b += Σ grad_out
//
// Every layer kind of models/ has a forward here with the shapes its
// LayerShape names; parameters are initialised from (seed, layer index), so a
// model gets the same initial weights whatever the partition.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "models/model.hpp"

namespace pipetwin::exec {

// Weight gradients of linear layers, queued by an input-gradient pass (I)
// and computed by the weight-gradient pass (W) of the same micro-batch.
class WeightGradQueue {
 public:
  // `held`: tensors the work keeps until it runs that the forward did not
  // stash (the output gradients), for the memory meter.
  void push(std::function<void()> work, std::vector<at::Tensor> held) {
    work_.push_back(std::move(work));
    held_.insert(held_.end(), held.begin(), held.end());
  }
  void run();
  bool empty() const { return work_.empty(); }
  const std::vector<at::Tensor>& held() const { return held_; }

 private:
  std::vector<std::function<void()>> work_;
  std::vector<at::Tensor> held_;
};

// While a queue is set, linear layers' backward queues their weight gradients
// there instead of computing them (the autograd engine may run backward on
// another thread: this is process-wide, set around one backward call).
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue* queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;
};

// y = x·Wᵀ + b, whose backward honours DeferWeightGrads.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

at::ScalarType dtype_of(models::Precision precision);

// Per-sample shape of what layer `index` outputs (the loss layer: a scalar).
std::vector<std::int64_t> output_shape(const models::Model& model, int index);
// Per-sample shape and type of the model input (token ids or features).
std::vector<std::int64_t> input_shape(const models::Model& model);
at::ScalarType input_dtype(const models::Model& model);
// True for the layer that ends in the loss (the model's last).
bool is_loss_layer(const models::Model& model, int index);

// Parameters of layer `index`, on the CPU, in fp32, from (seed, index).
std::vector<at::Tensor> init_layer(const models::Model& model, int index, std::uint64_t seed);

// Forward of layer `index`: `inputs` are its producers' outputs in the order
// of Layer::inputs (or the model input); `targets` only for the loss layer,
// which returns the mean loss over the micro-batch.
at::Tensor forward_layer(const models::Model& model, int index, const std::vector<at::Tensor>& inputs,
                         const std::vector<at::Tensor>& params, const at::Tensor& targets);

}  // namespace pipetwin::exec
