// Stage: parameters, cuts, forward, optimizer and weight versions.
#include "exec/torch_stage.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "exec/torch_checkpoint.hpp"
#include "exec/torch_layers.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {

std::vector<CutTensor> cut_tensors(const models::Model& model, int position, int sequence_split) {
  const int n = static_cast<int>(model.layers.size());
  std::set<int> crossing;
  for (int l = position; l < n; ++l) {
    const auto& inputs = model.layers[l].inputs;
    if (inputs.empty()) crossing.insert(-1);
    for (const int p : inputs) {
      if (p < position) crossing.insert(p);
    }
  }
  std::vector<CutTensor> out;
  for (const int p : crossing) {
    if (p < 0) {
      out.push_back({-1, input_shape(model), input_dtype(model), false});
    } else {
      auto shape = output_shape(model, p);
      if (sequence_split > 1 && !shape.empty()) shape[0] /= sequence_split;
      out.push_back({p, std::move(shape), dtype_of(model.precision), true});
    }
  }
  return out;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(models::Optimizer kind, std::vector<at::Tensor> params, double lr) {
  switch (kind) {
    case models::Optimizer::Adam: return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(lr));
    case models::Optimizer::Momentum:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9));
    case models::Optimizer::SGD: break;
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr));
}

MasterOptimizer::MasterOptimizer(models::Optimizer kind, std::vector<at::Tensor> params, double lr)
    : params_(std::move(params)) {
  const bool half = std::any_of(params_.begin(), params_.end(),
                                [](const at::Tensor& t) { return c10::isReducedFloatingType(t.scalar_type()); });
  if (!half) {
    direct_ = make_optimizer(kind, params_, lr);
    return;
  }
  for (const auto& p : params_) {
    masters_.push_back(p.detach().to(at::kFloat).clone().requires_grad_(true));
    per_master_.push_back(make_optimizer(kind, {masters_.back()}, lr));
  }
}

void MasterOptimizer::step() {
  if (direct_) {
    direct_->step();
    direct_->zero_grad();
    return;
  }
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    masters_[i].mutable_grad() = grad.to(at::kFloat);
    grad = at::Tensor();
    per_master_[i]->step();
    masters_[i].mutable_grad() = at::Tensor();
    params_[i].detach().copy_(masters_[i]);
  }
}

Stage::Stage(const models::Model& model, int index, schedule::LayerRange layers, bool last, int weight_versions,
             std::uint64_t seed, at::Device device, models::Optimizer optimizer, double lr, TpGroup tensor_group,
             bool sequence_parallel, ExpertGroup expert_group)
    : model_(model),
      index_(index),
      layers_(layers),
      last_(last),
      versioned_(weight_versions > 1),
      in_cut_(cut_tensors(model, layers.begin, sequence_parallel ? tp_size(tensor_group) : 1)),
      out_cut_(last ? std::vector<CutTensor>{} : cut_tensors(model, layers.end, sequence_parallel ? tp_size(tensor_group) : 1)),
      tp_(std::move(tensor_group)),
      sequence_parallel_(sequence_parallel && tp_size(tp_) > 1),
      experts_(std::move(expert_group)) {
  for (const auto& cut : out_cut_) {
    bool inside = cut.producer < layers.begin;
    for (int l = layers.begin; l < layers.end; ++l) {
      for (const int p : model.layers[l].inputs) inside = inside || p == cut.producer;
    }
    read_inside_.push_back(inside);
  }
  std::vector<at::Tensor> all;
  for (int l = layers.begin; l < layers.end; ++l) {
    auto& p = live_.emplace_back();
    auto full = tp_size(tp_) > 1 ? init_layer_shard(model, l, seed, tp_) : init_layer(model, l, seed);
    if (experts_) full = expert_shard(model.layers[l], full, experts_->getSize(), experts_->getRank());
    for (auto& t : full) {
      p.push_back(t.to(device, dtype_of(model.precision)).detach().requires_grad_(true));
      all.push_back(p.back());
    }
  }
  if (all.empty()) return;
  optimizer_ = std::make_unique<MasterOptimizer>(optimizer, std::move(all), lr);
}

void Stage::set_recompute(bool selective, const models::LayerCheckpoint& checkpoint) {
  selective_ = selective;
  groups_.clear();
  if (!checkpoint.by_layer()) return;
  const auto [first, end] = models::recomputed_layers(model_, checkpoint, layers_.begin, layers_.end);
  const int step = checkpoint.group_size();
  for (int g = first; g < end; g += step) groups_[g] = std::min(end, g + step);
}

at::Tensor Stage::run_layer(int l, const Values& values, const Params& params, const at::Tensor& targets,
                            LayerHooks* hooks) const {
  const auto& producers = model_.layers[l].inputs;
  std::vector<at::Tensor> args;
  if (producers.empty()) args.push_back(values.at(-1));
  for (const int p : producers) args.push_back(values.at(p));
  const auto& shard = params.at(l - layers_.begin);
  const at::Tensor t = is_loss_layer(model_, l) ? targets : at::Tensor();
  if (hooks != nullptr) hooks->before(l - layers_.begin);
  at::Tensor out;
  if (experts_ && model_.layers[l].kind == models::LayerKind::MoeBlock) {
    out = moe_block(model_.layers[l].shape, args.at(0), shard, experts_);
  } else {
    out = tp_size(tp_) > 1 ? forward_layer_tp(model_, l, args, shard, t, tp_, sequence_parallel_)
                           : forward_layer(model_, l, args, shard, t);
  }
  if (hooks != nullptr) hooks->after(l - layers_.begin, out);
  return out;
}

void Stage::run_group(int a, int e, Values& values, const Params& params, const at::Tensor& targets,
                      LayerHooks* hooks) const {
  // What the group reads from before it, and which of its outputs are read after it.
  std::vector<int> reads, keeps;
  for (int l = a; l < e; ++l) {
    const auto& producers = model_.layers[l].inputs;
    for (const int p : producers.empty() ? std::vector<int>{-1} : producers) {
      if (p < a && std::find(reads.begin(), reads.end(), p) == reads.end()) reads.push_back(p);
    }
  }
  for (int l = a; l < e; ++l) {
    bool kept = l + 1 == layers_.end;
    for (int r = e; r < static_cast<int>(model_.layers.size()); ++r) {
      for (const int p : model_.layers[r].inputs) kept = kept || p == l;
    }
    if (kept) keeps.push_back(l);
  }
  std::vector<at::Tensor> inputs;
  for (const int p : reads) inputs.push_back(values.at(p));
  const auto body = [this, a, e, reads, keeps, &params, targets, hooks](const std::vector<at::Tensor>& in) {
    Values inside;
    for (std::size_t i = 0; i < reads.size(); ++i) inside[reads[i]] = in[i];
    for (int l = a; l < e; ++l) inside[l] = run_layer(l, inside, params, targets, hooks);
    std::vector<at::Tensor> out;
    for (const int l : keeps) out.push_back(inside.at(l));
    return out;
  };
  const auto out = checkpointed(body, inputs);
  for (std::size_t i = 0; i < keeps.size(); ++i) values[keeps[i]] = out[i];
}

std::vector<at::Tensor> Stage::forward(const std::vector<at::Tensor>& inputs, const Params& params,
                                       const at::Tensor& targets, LayerHooks* hooks, bool layer_checkpoints) const {
  Values values;
  for (std::size_t i = 0; i < in_cut_.size(); ++i) values[in_cut_[i].producer] = inputs.at(i);
  SelectiveRecompute selective(selective_);
  for (int l = layers_.begin; l < layers_.end; ++l) {
    if (const auto g = groups_.find(l); layer_checkpoints && g != groups_.end()) {
      run_group(l, g->second, values, params, targets, hooks);
      l = g->second - 1;
      continue;
    }
    values[l] = run_layer(l, values, params, targets, hooks);
  }
  if (last_) return {values.at(layers_.end - 1)};
  std::vector<at::Tensor> out;
  for (const auto& c : out_cut_) {
    const at::Tensor& t = values.at(c.producer);
    // A tensor passing through gets a node of its own, so that its gradient
    // reaches this stage's input like any other.
    out.push_back(c.producer < layers_.begin && t.requires_grad() ? t.view_as(t) : t);
  }
  return out;
}

int Stage::acquire() {
  ++users_[version_];
  std::set<int> alive{version_};
  for (const auto& [v, n] : users_) {
    if (n > 0) alive.insert(v);
  }
  peak_versions_ = std::max(peak_versions_, static_cast<int>(alive.size()));
  return version_;
}

const Params& Stage::params(int version) {
  if (!versioned_) return live_;
  auto it = versions_.find(version);
  if (it == versions_.end()) {
    if (version != version_) throw Error("stage " + std::to_string(index_) + ": weight version " + std::to_string(version) + " is gone");
    Params copy;
    for (const auto& layer : live_) {
      auto& out = copy.emplace_back();
      for (const auto& t : layer) out.push_back(t.detach().clone().requires_grad_(true));
    }
    it = versions_.emplace(version, std::move(copy)).first;
  }
  return it->second;
}

void Stage::release(int version) {
  if (--users_[version] <= 0) users_.erase(version);
  if (!versioned_) return;
  const auto it = versions_.find(version);
  if (it == versions_.end()) return;
  torch::NoGradGuard no_grad;
  for (std::size_t l = 0; l < live_.size(); ++l) {
    for (std::size_t i = 0; i < live_[l].size(); ++i) {
      at::Tensor& g = it->second[l][i].mutable_grad();
      if (!g.defined()) continue;
      at::Tensor& into = live_[l][i].mutable_grad();
      if (into.defined()) {
        into.add_(g);
      } else {
        into = g.clone();
      }
      g = at::Tensor();
    }
  }
  if (!users_.count(version) && version != version_) versions_.erase(it);
}

void Stage::finish_gradients() {
  if (gradients_finished_) return;
  gradients_finished_ = true;
  if (!sequence_parallel_) return;
  for (std::size_t l = 0; l < live_.size(); ++l) sum_replicated_grads(model_, layers_.begin + static_cast<int>(l), live_[l], tp_);
}

void Stage::step() {
  finish_gradients();
  gradients_finished_ = false;
  if (optimizer_) optimizer_->step();
  ++version_;
  std::erase_if(versions_, [&](const auto& v) { return !users_.count(v.first); });
}

std::vector<at::Tensor> Stage::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& layer : live_) out.insert(out.end(), layer.begin(), layer.end());
  return out;
}

namespace {
// Where a layer's routed experts sit in the list a member of `g` holds: [begin, end).
std::pair<std::size_t, std::size_t> held_experts(const models::Layer& layer, const ExpertGroup& g) {
  const auto [first, end] = routed_expert_params(layer);
  const std::size_t E = g ? static_cast<std::size_t>(g->getSize()) : 1;
  return {first, first + (end - first) / E};
}
}  // namespace

std::vector<at::Tensor> Stage::routed_experts() const {
  std::vector<at::Tensor> out;
  for (std::size_t l = 0; l < live_.size(); ++l) {
    const auto [first, end] = held_experts(model_.layers[layers_.begin + static_cast<int>(l)], experts_);
    out.insert(out.end(), live_[l].begin() + static_cast<std::ptrdiff_t>(first),
               live_[l].begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

std::vector<at::Tensor> Stage::replicated() const {
  std::vector<at::Tensor> out;
  for (std::size_t l = 0; l < live_.size(); ++l) {
    const auto [first, end] = held_experts(model_.layers[layers_.begin + static_cast<int>(l)], experts_);
    for (std::size_t i = 0; i < live_[l].size(); ++i) {
      if (i < first || i >= end) out.push_back(live_[l][i]);
    }
  }
  return out;
}

std::int64_t Stage::grad_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& layer : live_) {
    for (const auto& p : layer) {
      if (p.grad().defined()) bytes += static_cast<std::int64_t>(p.grad().nbytes());
    }
  }
  return bytes;
}

void Stage::advance() {
  gradients_finished_ = false;
  for (auto& t : parameters()) t.mutable_grad() = at::Tensor();
  ++version_;
  std::erase_if(versions_, [&](const auto& v) { return !users_.count(v.first); });
}

std::map<int, std::vector<at::Tensor>> Stage::weights() const {
  std::map<int, std::vector<at::Tensor>> out;
  for (std::size_t l = 0; l < live_.size(); ++l) {
    const int index = layers_.begin + static_cast<int>(l);
    auto& w = out[index];
    std::vector<at::Tensor> detached;
    for (const auto& t : live_[l]) detached.push_back(t.detach());
    if (tp_size(tp_) > 1) detached = gather_layer(model_, index, detached, tp_);
    if (experts_) detached = gather_experts(model_.layers[index], detached, experts_);
    for (const auto& t : detached) w.push_back(t.to(at::kCPU).clone());
  }
  return out;
}

}  // namespace pipetwin::exec
