// TorchBackend's compute actions on the stage's layers: F, R, B, I and W, and
// the stashes they keep between forward and backward.
#include "exec/torch_backend.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>

#include <optional>

#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace ps = pipetwin::schedule;

at::Tensor TorchBackend::slice(const at::Tensor& t, int mb) const {
  const std::int64_t b = config_.microbatch_size;
  return t.narrow(0, mb * b, b).to(device_, /*non_blocking=*/false);
}

// Frees the data of stage outputs whose graph is kept for backward: only
// their gradient edge is needed (the sent copy lives until its send is
// done). Not for outputs that layers of the stage read: autograd may hold them.
void TorchBackend::release_outputs(const Stage& st, const std::vector<at::Tensor>& outputs) const {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& t = outputs[i];
    if (st.output_read_inside(i) || !t.requires_grad() || t.is_view() || t.grad_fn() == nullptr) continue;
    t.set_data(at::empty({0}, t.options().requires_grad(false)));
  }
}

std::vector<at::Tensor> TorchBackend::leaves(const Stage& st, const std::vector<at::Tensor>& inputs) const {
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    out.push_back(st.in_cut().at(i).grad ? inputs[i].detach().requires_grad_(true) : inputs[i]);
  }
  return out;
}

void TorchBackend::account_cuda_stash(int s, std::int64_t delta) { cuda_stash_[s] += delta; }

void TorchBackend::forward(int s, int mb) {
  Stage& st = stage(s);
  const auto& p = config_.program;
  std::vector<at::Tensor> inputs =
      st.first() ? std::vector<at::Tensor>{slice(batch_.inputs, mb)} : take({true, ps::StageId{s}, ps::MicrobatchId{mb}}, "activation");
  const at::Tensor targets = st.last() ? slice(batch_.targets, mb) : at::Tensor();
  Stash sh;
  sh.checkpointed = p.recomputes(ps::StageId{s}, ps::MicrobatchId{mb});
  // Recompute by layer: the forward keeps each group's input (and what the
  // groups do not cover) with autograd; B re-runs the groups.
  sh.layered = sh.checkpointed && config_.checkpoint.by_layer();
  sh.version = st.acquire();
  const std::int64_t before = device_.is_cuda() ? MemoryMeter::cuda_live_bytes(device_.index()) : 0;
  const Params& params = st.params(sh.version);  // a new weight version is weights, not stash
  LayerHooks* hooks = dp_ ? dp_->hooks(s) : nullptr;
  std::vector<at::Tensor> outputs;
  {
    std::optional<MemoryMeter::Tag> tag;
    if (meter_ != nullptr) tag.emplace(*meter_, s);
    if (sh.checkpointed && !sh.layered) {
      torch::NoGradGuard no_grad;
      outputs = st.forward(inputs, params, targets, hooks);
      sh.inputs = std::move(inputs);
    } else {
      sh.inputs = leaves(st, inputs);
      outputs = st.forward(sh.inputs, params, targets, hooks, sh.layered);
    }
  }
  std::vector<at::Tensor> sent;
  if (st.last()) {
    outputs[0] = outputs[0] / p.num_microbatches;  // the mini-batch loss is the mean over micro-batches
    loss_sum_ += outputs[0].detach().to(at::kDouble);
  } else {
    for (const auto& o : outputs) sent.push_back(o.detach());
    if (!sh.checkpointed || sh.layered) release_outputs(st, outputs);
  }
  if (!sh.checkpointed || sh.layered) sh.roots = std::move(outputs);
  else outputs.clear();
  // Outputs held only by their message are in flight, not stashed.
  std::int64_t in_flight = 0;
  for (const auto& t : sent) {
    if (t.storage().use_count() == 1) in_flight += static_cast<std::int64_t>(t.nbytes());
  }
  if (device_.is_cuda()) {
    sh.device_bytes = MemoryMeter::cuda_live_bytes(device_.index()) - before - in_flight;
    account_cuda_stash(s, sh.device_bytes);
  } else {
    in_flight_[s] += in_flight;
  }
  if (!sent.empty()) deliver({true, ps::StageId{s + 1}, ps::MicrobatchId{mb}}, std::move(sent), s, in_flight);
  stash_[{s, mb}] = std::move(sh);
}

void TorchBackend::recompute(int s, int mb) {
  Stage& st = stage(s);
  Stash& sh = stash(s, mb, "R");
  if (sh.layered) return;  // its layer groups re-run inside its backward
  if (!sh.checkpointed || !sh.roots.empty()) throw Error("R of " + mb_name(s, mb) + ", which holds its activations already");
  const at::Tensor targets = st.last() ? slice(batch_.targets, mb) : at::Tensor();
  const std::int64_t before = device_.is_cuda() ? MemoryMeter::cuda_live_bytes(device_.index()) : 0;
  {
    std::optional<MemoryMeter::Tag> tag;
    if (meter_ != nullptr) tag.emplace(*meter_, s);
    sh.inputs = leaves(st, sh.inputs);
    sh.roots = st.forward(sh.inputs, st.params(sh.version), targets, dp_ ? dp_->hooks(s) : nullptr);
  }
  if (st.last()) {
    sh.roots[0] = sh.roots[0] / config_.program.num_microbatches;
  } else {
    release_outputs(st, sh.roots);
  }
  if (device_.is_cuda()) {
    const std::int64_t grown = MemoryMeter::cuda_live_bytes(device_.index()) - before;
    sh.device_bytes += grown;
    account_cuda_stash(s, grown);
  }
}

void TorchBackend::backward(int s, int mb, bool input_only) {
  Stage& st = stage(s);
  Stash& sh = stash(s, mb, input_only ? "I" : "B");
  if (sh.roots.empty()) throw Error((input_only ? "I of " : "B of ") + mb_name(s, mb) + " without its activations (a recompute is missing)");
  std::vector<at::Tensor> grads = st.last() ? std::vector<at::Tensor>{at::ones_like(sh.roots[0])}
                                            : take({false, ps::StageId{s}, ps::MicrobatchId{mb}}, "gradient");
  torch::autograd::edge_list edges;
  torch::autograd::variable_list seeds;
  std::size_t g = 0;
  for (std::size_t i = 0; i < sh.roots.size(); ++i) {
    if (!st.last() && !st.out_cut().at(i).grad) continue;
    const at::Tensor& grad = grads.at(g++);
    if (!sh.roots[i].requires_grad()) continue;
    edges.push_back(torch::autograd::impl::gradient_edge(sh.roots[i]));
    seeds.push_back(grad);
  }
  // I keeps only what its deferred weight gradients need: the stash shrinks
  // to that (CUDA: the allocator's change across I, less the input gradients
  // handed on and the parameters' gradients it allocated).
  const bool measure = input_only && device_.is_cuda();
  const std::int64_t before = measure ? MemoryMeter::cuda_live_bytes(device_.index()) - st.grad_bytes() : 0;
  if (!edges.empty()) {
    DeferWeightGrads defer(input_only ? &sh.deferred : nullptr);
    if (dp_) dp_->backward_begin(s, !input_only);
    torch::autograd::Engine::get_default_engine().execute(edges, seeds, /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true);
    if (dp_) dp_->backward_end(s);
  }
  std::int64_t handed_on = 0;
  if (!st.first()) {
    std::vector<at::Tensor> input_grads;
    for (std::size_t i = 0; i < sh.inputs.size(); ++i) {
      if (!st.in_cut().at(i).grad) continue;
      const at::Tensor& gi = sh.inputs[i].grad();
      input_grads.push_back(gi.defined() ? gi : at::zeros_like(sh.inputs[i]));
      handed_on += static_cast<std::int64_t>(input_grads.back().nbytes());
    }
    deliver({false, ps::StageId{s - 1}, ps::MicrobatchId{mb}}, std::move(input_grads), s, 0);
  }
  sh.roots.clear();
  sh.inputs.clear();
  if (measure) {
    const std::int64_t delta = MemoryMeter::cuda_live_bytes(device_.index()) - st.grad_bytes() - handed_on - before;
    sh.device_bytes += delta;
    account_cuda_stash(s, delta);
  } else if (input_only && meter_ != nullptr) {
    for (const auto& t : sh.deferred.held()) meter_->attribute(t, s);
  }
  if (!input_only) weight_grad(s, mb);
}

void TorchBackend::weight_grad(int s, int mb) {
  Stash& sh = stash(s, mb, "W");
  if (!sh.roots.empty()) throw Error("W of " + mb_name(s, mb) + " before its I");
  sh.deferred.run();
  stage(s).release(sh.version);
  if (dp_) dp_->microbatch_done(s);
  if (device_.is_cuda()) account_cuda_stash(s, -sh.device_bytes);
  stash_.erase({s, mb});
}

}  // namespace pipetwin::exec
