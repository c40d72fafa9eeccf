// TorchBackend: each action of the IR carried out with LibTorch and c10d.
#include "exec/torch_backend.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include <cstdlib>
#include <tuple>

#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace ps = pipetwin::schedule;

namespace {

class HostClock final : public ActionClock {
 public:
  explicit HostClock(const Comm& comm) : comm_(comm) {}
  void begin_step() override { times_.clear(); }
  std::size_t start() override {
    times_.push_back({comm_.now(), 0});
    return times_.size() - 1;
  }
  void stop(std::size_t token) override { times_[token].second = comm_.now(); }
  std::vector<std::pair<double, double>> resolve() override { return times_; }

 private:
  const Comm& comm_;
  std::vector<std::pair<double, double>> times_;
};

// Events on the current stream, read back once per step against a reference
// event whose host time is known (taken after a synchronize).
class CudaClock final : public ActionClock {
 public:
  explicit CudaClock(const Comm& comm) : comm_(comm) {}
  void begin_step() override {
    events_.clear();
    torch::cuda::synchronize();
    reference_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    reference_->record();
    reference_->synchronize();
    reference_host_ = comm_.now();
  }
  std::size_t start() override {
    events_.emplace_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault),
                         std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    events_.back().first->record();
    return events_.size() - 1;
  }
  void stop(std::size_t token) override { events_[token].second->record(); }
  std::vector<std::pair<double, double>> resolve() override {
    torch::cuda::synchronize();
    std::vector<std::pair<double, double>> out;
    for (const auto& [a, b] : events_) {
      out.emplace_back(reference_host_ + reference_->elapsed_time(*a) / 1e3,
                       reference_host_ + reference_->elapsed_time(*b) / 1e3);
    }
    return out;
  }

 private:
  const Comm& comm_;
  std::unique_ptr<at::cuda::CUDAEvent> reference_;
  double reference_host_ = 0;
  std::vector<std::pair<std::unique_ptr<at::cuda::CUDAEvent>, std::unique_ptr<at::cuda::CUDAEvent>>> events_;
};


constexpr int kMaxCutTensors = 64;

std::string mb_name(int s, int mb) { return "stage " + std::to_string(s) + " micro-batch " + std::to_string(mb); }

}  // namespace

std::unique_ptr<ActionClock> make_clock(const Comm& comm, bool cuda) {
  if (cuda) return std::make_unique<CudaClock>(comm);
  return std::make_unique<HostClock>(comm);
}

TorchBackend::TorchBackend(const RunConfig& config, Comm& comm, at::Device device, MemoryMeter* meter)
    : config_(config),
      comm_(comm),
      where_(Placement::of(config.program, comm.rank())),
      device_(device),
      meter_(meter),
      clock_(make_clock(comm, device.is_cuda())) {
  const auto& p = config.program;
  if (static_cast<double>(p.num_stages()) * p.num_microbatches * 4 * kMaxCutTensors > 2e9) {
    throw Error("too many stages x micro-batches for c10d message tags (" + std::to_string(p.num_stages()) + " x " +
                std::to_string(p.num_microbatches) + ")");
  }
  // The tensor group first on every process, then the data group: each
  // group's members build it in the same order, so no rendezvous waits on another.
  TpGroup tensor_group;
  if (p.tensor_parallel > 1) {
    tensor_group = comm.subgroup("tensor/" + std::to_string(where_.pipeline_rank) + "/" + std::to_string(where_.replica),
                                 where_.tensor_group());
  }
  if (p.data_parallel > 1) {
    dp_ = std::make_unique<DataParallel>(comm, where_, p.shard_optimizer, config.optimizer, config.lr);
  }
  for (const auto s : p.stages_of(ps::RankId{where_.pipeline_rank})) {
    const int versions = p.weight_versions.empty() ? 1 : p.weight_versions.at(s.value);
    stages_[s.value] = std::make_unique<Stage>(config.model, s.value, p.partition.at(s.value), p.is_last_stage(s),
                                               versions, config.seed, device, config.optimizer, config.lr, tensor_group,
                                               p.sequence_parallel);
    for (const auto* cut : {&stages_[s.value]->in_cut(), &stages_[s.value]->out_cut()}) {
      if (cut->size() > static_cast<std::size_t>(kMaxCutTensors)) {
        throw Error("stage " + std::to_string(s.value) + ": a cut carries " + std::to_string(cut->size()) +
                    " tensors, more than " + std::to_string(kMaxCutTensors));
      }
    }
  }
  // Gloo: each receive is posted when the one before it on this rank's list
  // is taken, so that its data can come while the rank computes
  // (PIPETWIN_POST_AHEAD=0: each is posted when its RECV runs). NCCL orders
  // a posted receive before later work on its stream: not there.
  const char* ahead = std::getenv("PIPETWIN_POST_AHEAD");
  post_ahead_ = !device.is_cuda() && (ahead == nullptr || std::string(ahead) != "0");
  if (post_ahead_) {
    for (const auto& a : p.ranks.at(where_.pipeline_rank)) {
      if (ps::is_recv(a.op)) receives_.push_back(a);
    }
  }
}

bool TorchBackend::holds_last_stage() const {
  return stages_.count(config_.program.num_stages() - 1) > 0;
}

Stage& TorchBackend::stage(int s) {
  const auto it = stages_.find(s);
  if (it == stages_.end()) throw Error("stage " + std::to_string(s) + " is not on this rank");
  return *it->second;
}

TorchBackend::Stash& TorchBackend::stash(int s, int mb, const char* op) {
  const auto it = stash_.find({s, mb});
  if (it == stash_.end()) throw Error(std::string(op) + " of " + mb_name(s, mb) + " before its forward");
  return it->second;
}

void TorchBackend::begin_step(int step, const Batch& batch) {
  step_ = step;
  batch_ = batch;
  loss_sum_ = at::zeros({}, at::TensorOptions(at::kDouble).device(device_));
  compute_cpu_s_ = 0;
  timed_.clear();
  reductions_.clear();
  if (dp_) dp_->begin_step();
  clock_->begin_step();
  next_receive_ = 0;
  post_ahead();  // this step's first receive
}

std::vector<ps::TimedAction> TorchBackend::end_step() {
  reap_sends(/*wait_all=*/true);
  if (!stash_.empty() || !inbox_.empty() || !outbox_.empty() || !posted_.empty()) {
    const auto [s, mb] = stash_.empty() ? std::pair{-1, -1} : stash_.begin()->first;
    throw Error("step " + std::to_string(step_) + " ended with work left over" +
                (s >= 0 ? " (" + mb_name(s, mb) + " still stashed: its backward never ran)" : std::string(" (unused messages)")));
  }
  loss_ = loss_sum_.item<double>();
  const auto times = clock_->resolve();
  std::vector<ps::TimedAction> out;
  for (const auto& [action, token] : timed_) out.push_back({action, times[token].first, times[token].second});
  for (const auto& [index, id] : reductions_) std::tie(out[index].start, out[index].end) = dp_->times(id);
  return out;
}

at::Tensor TorchBackend::slice(const at::Tensor& t, int mb) const {
  const std::int64_t b = config_.microbatch_size;
  return t.narrow(0, mb * b, b).to(device_, /*non_blocking=*/false);
}

// Distinct for every message of two consecutive steps, with room for
// kMaxCutTensors tensors per message.
int TorchBackend::tag(const ps::MessageKey& key) const {
  const auto& p = config_.program;
  const int s = p.num_stages(), m = p.num_microbatches;
  return ((((step_ % 2) * m + key.microbatch.value) * s + key.to_stage.value) * 2 + (key.forward ? 0 : 1)) * kMaxCutTensors;
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

void TorchBackend::deliver(const ps::MessageKey& key, std::vector<at::Tensor> tensors, int from_stage,
                           std::int64_t in_flight) {
  const bool local = config_.program.rank_of(key.to_stage).value == where_.pipeline_rank;
  if (local) {
    inbox_[key] = std::move(tensors);
    in_flight_[from_stage] -= in_flight;  // becomes the next stage's stashed input
    return;
  }
  outbox_[key] = {std::move(tensors), from_stage, in_flight};
}

std::vector<at::Tensor> TorchBackend::take(const ps::MessageKey& key, const char* what) {
  const auto it = inbox_.find(key);
  if (it == inbox_.end()) {
    throw Error(std::string("no ") + what + " for " + mb_name(key.to_stage.value, key.microbatch.value) +
                " has arrived (the schedule has no receive before this use)");
  }
  auto out = std::move(it->second);
  inbox_.erase(it);
  return out;
}

std::vector<at::Tensor> TorchBackend::leaves(const Stage& st, const std::vector<at::Tensor>& inputs) const {
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    out.push_back(st.in_cut().at(i).grad ? inputs[i].detach().requires_grad_(true) : inputs[i]);
  }
  return out;
}

void TorchBackend::account_cuda_stash(int s, std::int64_t delta) { cuda_stash_[s] += delta; }

void TorchBackend::compute(ps::RankId, const ps::Action& a) {
  const int s = a.stage.value, mb = a.microbatch ? a.microbatch->value : 0;
  // The wait for the stage's reduction is idle time, not the step's.
  if (a.op == ps::Op::STEP && dp_) dp_->wait(stage(s));
  const double cpu_before = thread_cpu_seconds();
  const std::size_t token = clock_->start();
  switch (a.op) {
    case ps::Op::F: forward(s, mb); break;
    case ps::Op::R: recompute(s, mb); break;
    case ps::Op::B: backward(s, mb, false); break;
    case ps::Op::I: backward(s, mb, true); break;
    case ps::Op::W: weight_grad(s, mb); break;
    case ps::Op::STEP: dp_ ? dp_->step(stage(s)) : stage(s).step(); break;
    case ps::Op::REDUCE_GRAD:
      // A data group of one replica has nothing to reduce.
      stage(s).finish_gradients();
      if (dp_) reductions_[timed_.size()] = dp_->reduce(stage(s));
      break;
    default: throw Error(std::string(ps::op_name(a.op)) + " is not supported by pipetwin run");
  }
  clock_->stop(token);
  compute_cpu_s_ += thread_cpu_seconds() - cpu_before;
  timed_.emplace_back(a, token);
  sample_stash();
}

// The stash is what stays between actions: sampled after each one, so that
// temporaries inside a forward do not count (the rank's allocator peak does).
void TorchBackend::sample_stash() {
  for (const auto& [s, _] : stages_) {
    const std::int64_t now = meter_ != nullptr ? meter_->stage_bytes(s) - in_flight_[s] - posted_bytes_[s] : cuda_stash_[s];
    stash_peak_[s] = std::max(stash_peak_[s], now);
  }
}

void TorchBackend::forward(int s, int mb) {
  Stage& st = stage(s);
  const auto& p = config_.program;
  std::vector<at::Tensor> inputs =
      st.first() ? std::vector<at::Tensor>{slice(batch_.inputs, mb)} : take({true, ps::StageId{s}, ps::MicrobatchId{mb}}, "activation");
  const at::Tensor targets = st.last() ? slice(batch_.targets, mb) : at::Tensor();
  Stash sh;
  sh.checkpointed = p.recomputes(ps::StageId{s}, ps::MicrobatchId{mb});
  sh.version = st.acquire();
  const std::int64_t before = device_.is_cuda() ? MemoryMeter::cuda_live_bytes(device_.index()) : 0;
  const Params& params = st.params(sh.version);  // a new weight version is weights, not stash
  std::vector<at::Tensor> outputs;
  {
    std::optional<MemoryMeter::Tag> tag;
    if (meter_ != nullptr) tag.emplace(*meter_, s);
    if (sh.checkpointed) {
      torch::NoGradGuard no_grad;
      outputs = st.forward(inputs, params, targets);
      sh.inputs = std::move(inputs);
    } else {
      sh.inputs = leaves(st, inputs);
      outputs = st.forward(sh.inputs, params, targets);
    }
  }
  std::vector<at::Tensor> sent;
  if (st.last()) {
    outputs[0] = outputs[0] / p.num_microbatches;  // the mini-batch loss is the mean over micro-batches
    loss_sum_ += outputs[0].detach().to(at::kDouble);
  } else {
    for (const auto& o : outputs) sent.push_back(o.detach());
    if (!sh.checkpointed) release_outputs(st, outputs);
  }
  if (!sh.checkpointed) sh.roots = std::move(outputs);
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
  if (!sh.checkpointed || !sh.roots.empty()) throw Error("R of " + mb_name(s, mb) + ", which holds its activations already");
  const at::Tensor targets = st.last() ? slice(batch_.targets, mb) : at::Tensor();
  const std::int64_t before = device_.is_cuda() ? MemoryMeter::cuda_live_bytes(device_.index()) : 0;
  {
    std::optional<MemoryMeter::Tag> tag;
    if (meter_ != nullptr) tag.emplace(*meter_, s);
    sh.inputs = leaves(st, sh.inputs);
    sh.roots = st.forward(sh.inputs, st.params(sh.version), targets);
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
    torch::autograd::Engine::get_default_engine().execute(edges, seeds, /*keep_graph=*/false, /*create_graph=*/false,
                                                          /*accumulate_grad=*/true);
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
  if (device_.is_cuda()) account_cuda_stash(s, -sh.device_bytes);
  stash_.erase({s, mb});
}

void TorchBackend::send(ps::RankId, const ps::Action& a, ps::RankId peer) {
  const std::size_t token = clock_->start();
  const auto key = ps::message_of(a);
  const auto it = outbox_.find(key);
  if (it == outbox_.end()) {
    throw Error(ps::to_string(a) + " has nothing to send: " + (key.forward ? "the forward" : "the backward") + " of " +
                mb_name(a.stage.value, key.microbatch.value) + " has not run on this rank");
  }
  std::vector<at::Tensor> tensors;
  for (auto& t : it->second.tensors) tensors.push_back(t.contiguous());
  const int from_stage = it->second.from_stage;
  const std::int64_t in_flight = it->second.in_flight;
  outbox_.erase(it);
  // c10d sends one tensor at a time: tensor i of a message gets tag + i. The
  // message's in-flight bytes are released with its last tensor.
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::vector<at::Tensor> one{tensors[i]};
    auto work = comm_.send(one, where_.device_at(peer.value), tag(key) + static_cast<int>(i), key.forward);
    const bool last = i + 1 == tensors.size();
    sending_.push_back({std::move(work), std::move(one), from_stage, last ? in_flight : 0});
  }
  reap_sends(false);
  clock_->stop(token);
  timed_.emplace_back(a, token);
}

TorchBackend::Posted TorchBackend::post(const ps::Action& a, ps::RankId peer) {
  const auto key = ps::message_of(a);
  const int s = key.to_stage.value;
  Stage& st = stage(s);
  Posted out;
  {
    std::optional<MemoryMeter::Tag> tag;
    if (meter_ != nullptr && key.forward) tag.emplace(*meter_, s);  // received inputs are stashed
    for (const auto& c : key.forward ? st.in_cut() : st.out_cut()) {
      if (!key.forward && !c.grad) continue;
      std::vector<std::int64_t> shape{config_.microbatch_size};
      shape.insert(shape.end(), c.shape.begin(), c.shape.end());
      out.buffers.push_back(at::empty(shape, at::TensorOptions(c.dtype).device(device_)));
    }
  }
  out.stage = s;
  if (post_ahead_ && meter_ != nullptr && key.forward) {
    // Until its data is there, a posted buffer is the transport's, not the
    // stash's (as a sent output is until its send completes).
    for (const auto& b : out.buffers) out.waiting += static_cast<std::int64_t>(b.nbytes());
    posted_bytes_[s] += out.waiting;
  }
  for (std::size_t i = 0; i < out.buffers.size(); ++i) {
    std::vector<at::Tensor> one{out.buffers[i]};
    if (post_ahead_) {
      out.works.push_back(comm_.post_recv(one, where_.device_at(peer.value), tag(key) + static_cast<int>(i)));
    } else {
      comm_.recv(one, where_.device_at(peer.value), tag(key) + static_cast<int>(i), key.forward);
    }
  }
  return out;
}

// Posts the next receive of this rank's list, one ahead of the one it waits on.
void TorchBackend::post_ahead() {
  if (!post_ahead_ || next_receive_ >= receives_.size()) return;
  const ps::Action& a = receives_[next_receive_++];
  posted_.emplace(ps::message_of(a), post(a, ps::peer_of(config_.program, a)));
}

bool TorchBackend::recv(ps::RankId, const ps::Action& a, ps::RankId peer) {
  const std::size_t token = clock_->start();
  const auto key = ps::message_of(a);
  auto it = posted_.find(key);
  if (it == posted_.end()) {
    if (post_ahead_ && next_receive_ < receives_.size() && ps::message_of(receives_[next_receive_]) == key) ++next_receive_;
    it = posted_.emplace(key, post(a, peer)).first;
  }
  Posted got = std::move(it->second);
  posted_.erase(it);
  post_ahead();
  for (auto& w : got.works) w->wait();  // rethrows a failed receive
  posted_bytes_[got.stage] -= got.waiting;
  inbox_[key] = std::move(got.buffers);
  clock_->stop(token);
  timed_.emplace_back(a, token);
  sample_stash();
  return true;
}

void TorchBackend::reap_sends(bool wait_all) {
  std::erase_if(sending_, [&](Sending& entry) {
    if (!wait_all && !entry.work->isCompleted()) return false;
    entry.work->wait();  // rethrows a failed send
    entry.tensors.clear();
    in_flight_[entry.from_stage] -= entry.in_flight;
    return true;
  });
}

std::vector<std::pair<int, double>> TorchBackend::stage_peak_stash_bytes() const {
  std::vector<std::pair<int, double>> out;
  for (const auto& [s, _] : stages_) out.emplace_back(s, static_cast<double>(stash_peak_.count(s) ? stash_peak_.at(s) : 0));
  return out;
}

}  // namespace pipetwin::exec
