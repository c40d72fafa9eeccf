// ShardedStage: ZeRO-2 and ZeRO-3 of one stage over its data group.
#include "exec/torch_zero.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "exec/torch_collectives.hpp"
#include "exec/torch_comm.hpp"
#include "exec/torch_memory.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

c10::StorageImpl& storage_of(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  if (s->allocator() == nullptr) throw Error("ZeRO-3: a weight's storage has no allocator to refill it from");
  return *s;
}

// The tensor keeps its sizes; its storage holds nothing.
void free_storage(const at::Tensor& t) {
  c10::StorageImpl& s = storage_of(t);
  s.set_data_ptr_noswap(s.allocator()->allocate(0));
  s.set_nbytes(0);
}

// The storage allocated again (`nbytes`) and `values` written into it, past
// autograd: the tensor's version stays that of the graph that saved it.
void refill_storage(const at::Tensor& t, std::size_t nbytes, const at::Tensor& values) {
  c10::StorageImpl& s = storage_of(t);
  if (s.nbytes() != nbytes) {
    s.set_data_ptr_noswap(s.allocator()->allocate(nbytes));
    s.set_nbytes(nbytes);
  }
  at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().requires_grad(false)).copy_(values.view(t.sizes()));
}

}  // namespace

struct ShardedStage::Unit {
  int position = 0;
  std::vector<at::Tensor> params;    // the stage's live tensors
  std::vector<std::size_t> nbytes;   // each one's storage, whole
  std::int64_t chunk = 0;            // elements of one replica's part
  at::Tensor part;                   // ZeRO-3: this replica's part of the weights, in their type
  at::Tensor master;                 // fp32: the optimizer's
  at::Tensor grad;                   // this replica's part of the reduced gradients, summed
  bool present = true;               // the weights whole in `params`
  c10::intrusive_ptr<c10d::Work> gathering;
  at::Tensor gathered;
};

ShardedStage::ShardedStage(Stage& stage, c10d::Backend& group, c10d::Backend* across, int index, int replicas,
                           ZeroOptions options, MemoryMeter* meter)
    : stage_(stage),
      group_(group),
      across_(across),
      size_(static_cast<int>(group.getSize())),
      replicas_(replicas),
      options_(options),
      meter_(meter) {
  const int size = size_;
  const Params& live = stage.live();
  const int n = static_cast<int>(live.size()), begin = stage.layers().begin;
  unit_of_.assign(static_cast<std::size_t>(n), -1);
  readers_.resize(static_cast<std::size_t>(n));
  std::vector<at::Tensor> masters;
  for (int pos = 0; pos < n; ++pos) {
    if (live[pos].empty()) continue;
    Unit u;
    u.position = pos;
    u.params = live[pos];
    std::int64_t numel = 0;
    for (const auto& p : u.params) {
      if (p.scalar_type() != u.params.front().scalar_type() || !p.is_contiguous()) {
        throw Error("stage " + std::to_string(stage.index()) + ", layer " + std::to_string(begin + pos) +
                    ": ZeRO shards a layer's weights as one flat buffer of one type");
      }
      numel += p.numel();
      u.nbytes.push_back(p.storage().nbytes());
    }
    u.chunk = (numel + size - 1) / size;
    const at::Tensor mine = flat_weights(u.params, u.chunk * size).narrow(0, u.chunk * index, u.chunk);
    u.master = mine.to(at::kFloat).clone().requires_grad_(true);
    if (shards_weights()) u.part = mine.clone();
    masters.push_back(u.master);
    unit_of_[pos] = static_cast<int>(units_.size());
    units_.push_back(std::move(u));
  }
  inside_inputs_.assign(units_.size(), 0);
  for (std::size_t v = 0; v < units_.size(); ++v) {
    for (const int p : stage.model().layers.at(begin + units_[v].position).inputs) {
      if (p < begin) continue;
      readers_.at(p - begin).push_back(v);
      ++inside_inputs_[v];
    }
  }
  if (!masters.empty()) optimizer_ = make_optimizer(options.optimizer, std::move(masters), options.lr);
  if (shards_weights()) {
    for (std::size_t u = 0; u < units_.size(); ++u) release(u);
  }
}

ShardedStage::~ShardedStage() = default;

int ShardedStage::unit_at(int position) const { return unit_of_.at(static_cast<std::size_t>(position)); }

void ShardedStage::post_gather(std::size_t u) {
  Unit& x = units_.at(u);
  if (x.present || x.gathering) return;
  std::optional<MemoryMeter::Tag> none;
  if (meter_ != nullptr) none.emplace(*meter_, -1);
  x.gathered = at::empty({x.chunk * size_}, x.part.options());
  x.gathering = start_collective(group_, schedule::CollectiveAlgorithm::RingAllGather, x.part, x.gathered);
}

void ShardedStage::materialize(std::size_t u) {
  Unit& x = units_.at(u);
  if (x.present) return;
  post_gather(u);
  const double start = monotonic_now();
  x.gathering->wait();
  gather_wait_s_ += monotonic_now() - start;
  std::optional<MemoryMeter::Tag> none;
  if (meter_ != nullptr) none.emplace(*meter_, -1);
  torch::NoGradGuard no_grad;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < x.params.size(); ++i) {
    const std::int64_t numel = x.params[i].numel();
    refill_storage(x.params[i], x.nbytes[i], x.gathered.narrow(0, offset, numel));
    offset += numel;
  }
  x.gathering.reset();
  x.gathered = at::Tensor();
  x.present = true;
}

void ShardedStage::release(std::size_t u) {
  Unit& x = units_.at(u);
  if (!x.present) return;
  for (const auto& p : x.params) free_storage(p);
  x.present = false;
}

void ShardedStage::discard(std::size_t u) {
  Unit& x = units_.at(u);
  if (x.gathering) {  // finished before the storage goes
    x.gathering->wait();
    x.gathering.reset();
    x.gathered = at::Tensor();
  }
  release(u);
}

void ShardedStage::before(int position) {
  if (!shards_weights()) return;
  const int u = unit_at(position);
  if (u < 0) return;
  materialize(static_cast<std::size_t>(u));
  if (static_cast<std::size_t>(u) + 1 < units_.size()) post_gather(static_cast<std::size_t>(u) + 1);
}

void ShardedStage::after(int position, const at::Tensor& output) {
  if (!frees_after_use()) return;
  // A backward through this output will need the unit (and tells the units
  // reading it that their part of the backward is over).
  if (at::GradMode::is_enabled() && output.defined() && output.requires_grad()) {
    output.register_hook([this, position](const at::Tensor&) { on_output_gradient(position); });
  }
  const int u = unit_at(position);
  if (u >= 0) release(static_cast<std::size_t>(u));
}

// The gradient of the output of the layer at `position` is complete: every
// layer reading it has run its backward (its units are freed), and the
// layer's own backward comes next (its unit gathered, the one before it
// prefetched).
void ShardedStage::on_output_gradient(int position) {
  if (!in_backward_) return;
  for (const std::size_t v : readers_.at(static_cast<std::size_t>(position))) {
    if (--waiting_.at(v) != 0) continue;
    release(v);
    // Its weights' gradients are in (autograd accumulates a gradient as
    // soon as it is made): reduced now, while the backward goes on.
    if (reduce_in_backward_) post_reduction(v);
  }
  const int u = unit_at(position);
  if (u < 0) return;
  materialize(static_cast<std::size_t>(u));
  if (u > 0) post_gather(static_cast<std::size_t>(u) - 1);
}

void ShardedStage::backward_begin(bool weight_gradients) {
  in_backward_ = true;
  reduce_in_backward_ = weight_gradients && frees_after_use();
  waiting_ = inside_inputs_;
}

void ShardedStage::backward_end() {
  in_backward_ = false;
  reduce_in_backward_ = false;
  if (!frees_after_use()) return;
  for (std::size_t u = 0; u < units_.size(); ++u) discard(u);  // a prefetch a layer's backward did not need
}

void ShardedStage::microbatch_done() {
  if (!shards_weights() || options_.reshard_after_forward) post_reductions();
}

void ShardedStage::reduce() {
  if (shards_weights() && !options_.reshard_after_forward) post_reductions();
}

// Each unit's gradients (last unit first, as a backward makes them)
// reduce-scattered, posted; the whole gradients dropped. Units without
// gradients (posted already) are passed over.
void ShardedStage::post_reductions() {
  for (std::size_t u = units_.size(); u-- > 0;) post_reduction(u);
}

void ShardedStage::post_reduction(std::size_t u) {
  Unit& x = units_.at(u);
  if (std::none_of(x.params.begin(), x.params.end(), [](const at::Tensor& p) { return p.grad().defined(); })) return;
  // One reduction in flight besides this one, as FSDP2 waits for the one
  // before it: the whole gradients (and the backend's copies of them) of at
  // most two units are held at once.
  reap(false);
  while (reductions_.size() >= kInFlight) finish_oldest();
  std::optional<MemoryMeter::Tag> none;
  if (meter_ != nullptr) none.emplace(*meter_, -1);
  Reduction r;
  r.unit = u;
  r.whole = flat_gradients(x.params, size_);
  for (auto& p : x.params) p.mutable_grad() = at::Tensor();
  r.part = at::empty({x.chunk}, r.whole.options());
  r.work = start_collective(group_, schedule::CollectiveAlgorithm::RingReduceScatter, r.whole, r.part);
  step_bytes_ += static_cast<std::int64_t>(r.whole.nbytes());
  reductions_.push_back(std::move(r));
}

// Completed reductions (all: each waited for) summed into their units'
// parts, in the order they were posted.
void ShardedStage::reap(bool all) {
  while (!reductions_.empty() && (all || reductions_.front().work->isCompleted())) finish_oldest();
}

void ShardedStage::finish_oldest() {
  Reduction r = std::move(reductions_.front());
  reductions_.pop_front();
  r.work->wait();  // rethrows a failed collective (a replica gone)
  Unit& x = units_.at(r.unit);
  x.grad = x.grad.defined() ? x.grad.add_(r.part) : r.part;
}

std::vector<c10::intrusive_ptr<c10d::Work>> ShardedStage::in_flight() const {
  std::vector<c10::intrusive_ptr<c10d::Work>> out;
  for (const auto& r : reductions_) out.push_back(r.work);
  return out;
}

void ShardedStage::wait() { reap(true); }

void ShardedStage::step() {
  wait();
  torch::NoGradGuard no_grad;
  for (auto& x : units_) {
    if (!x.grad.defined()) x.grad = at::zeros({x.chunk}, x.params.front().options().requires_grad(false));
    // HSDP: the part summed over the shard groups too (at the STEP, which
    // every replica reaches in the same order).
    if (across_ != nullptr) all_reduce_across(*across_, x.grad);
    x.master.mutable_grad() = x.grad.to(at::kFloat).div_(replicas_);
    x.grad = at::Tensor();
  }
  if (optimizer_) optimizer_->step();
  for (auto& x : units_) {
    x.master.mutable_grad() = at::Tensor();
    x.part = x.master.detach().to(x.params.front().scalar_type()).contiguous();
  }
  if (shards_weights()) {
    for (std::size_t u = 0; u < units_.size(); ++u) release(u);  // without resharding, kept since the step's first forward
  } else {
    // ZeRO-2: every unit's updated weights gathered into every replica, one
    // gather at a time, each timed (calibrate fits them as rings). Marked
    // absent, a unit's gather refills its tensors in place.
    for (auto& x : units_) x.present = false;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const double posted = monotonic_now();
      post_gather(u);
      materialize(u);
      ++step_gathers_.calls;
      step_gathers_.seconds += monotonic_now() - posted;
      step_gathers_.part_bytes += static_cast<double>(units_[u].part.nbytes());
      units_[u].part = at::Tensor();
    }
  }
  step_bytes_ = 0;
  stage_.advance();
}

void ShardedStage::gather_all() {
  if (!shards_weights()) return;
  for (std::size_t u = 0; u < units_.size(); ++u) post_gather(u);
  for (std::size_t u = 0; u < units_.size(); ++u) materialize(u);
}

std::vector<c10::intrusive_ptr<c10d::Work>> ShardedStage::unshard() {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  if (!keeps_weights()) return works;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    post_gather(u);
    if (units_[u].gathering) works.push_back(units_[u].gathering);
  }
  return works;
}

void ShardedStage::gathered() {
  if (!keeps_weights()) return;
  for (std::size_t u = 0; u < units_.size(); ++u) materialize(u);
}

void ShardedStage::reshard() {
  if (!keeps_weights()) return;
  for (std::size_t u = 0; u < units_.size(); ++u) discard(u);
}

}  // namespace pipetwin::exec
