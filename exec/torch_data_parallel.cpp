// DataParallel: a stage's gradient reduction over its data group, and ZeRO-1.
#include "exec/torch_data_parallel.hpp"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <limits>

#include "exec/torch_collectives.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

// Called by autograd once a weight's gradient has been accumulated.
struct GradientMade final : torch::autograd::PostAccumulateGradHook {
  explicit GradientMade(std::function<void()> f) : made(std::move(f)) {}
  void operator()(const torch::autograd::Variable&) override { made(); }
  std::function<void()> made;
};

// Each weight's gradient, a copy of its slice of the reduced `flat`.
void gradients_from(const std::vector<at::Tensor>& params, const at::Tensor& flat) {
  std::int64_t offset = 0;
  for (auto w : params) {
    w.mutable_grad() = flat.narrow(0, offset, w.numel()).view_as(w).clone();
    offset += w.numel();
  }
}

// A watcher thread's body: waits for `works` and stores when they ended
// (their errors, if any, are for whoever waits for them next to report).
void note_end(const std::vector<c10::intrusive_ptr<c10d::Work>>& works, const std::shared_ptr<std::atomic<double>>& end,
              const Comm& comm) {
  try {
    for (const auto& w : works) w->wait();
    end->store(comm.now());
  } catch (const std::exception&) {
  }
}

void check_one_dtype(const Stage& stage, const std::vector<at::Tensor>& params) {
  for (const auto& p : params) {
    if (p.scalar_type() != params.front().scalar_type()) {
      throw Error("stage " + std::to_string(stage.index()) + ": its weights mix " +
                  std::string(c10::toString(p.scalar_type())) + " and " +
                  std::string(c10::toString(params.front().scalar_type())) + ": the data group reduces one flat buffer");
    }
  }
}

}  // namespace

DataParallel::DataParallel(Comm& comm, const Placement& where, int zero, bool reshard_after_forward,
                           models::Optimizer optimizer, double lr, MemoryMeter* meter)
    : comm_(comm), where_(where), zero_{zero, reshard_after_forward, optimizer, lr}, meter_(meter) {
  if (where.data <= 1) return;
  const std::string name = "data/" + std::to_string(where.pipeline_rank) + "/" + std::to_string(where.member);
  if (where.shard_size() == where.data) {
    group_ = comm.subgroup(name, where.data_group(where.pipeline_rank));
    // Expert parallelism: the replicas that hold the same experts, after the data group.
    if (where.expert > 1 && where.expert < where.data) {
      expert_peers_ = comm.subgroup(name + "/experts/" + std::to_string(where.expert_index()),
                                    where.expert_peers(where.pipeline_rank));
    }
    return;
  }
  // HSDP: every process builds its shard group, then its group across the
  // shard groups, in that order.
  const int first = where.replica - where.shard_index();
  group_ = comm.subgroup(name + "/shard/" + std::to_string(first), where.shard_group(where.pipeline_rank));
  across_ = comm.subgroup(name + "/across/" + std::to_string(where.shard_index()), where.replicate_group(where.pipeline_rank));
}

void DataParallel::set_buckets(double bytes, double first_bytes) {
  bucket_bytes_ = bytes;
  first_bucket_bytes_ = first_bytes;
}

void DataParallel::adopt(Stage& stage) {
  if (!group_) return;
  if (zero_.level == 0 && (bucket_bytes_ > 0 || first_bucket_bytes_ > 0)) build_buckets(stage);
  if (zero_.level < 2) return;
  zero_stages_[stage.index()] = std::make_unique<ShardedStage>(stage, *group_, across_.get(), where_.shard_index(), where_.data,
                                                               zero_, meter_);
  stage.drop_optimizer();
}

// The stage's weights, its last first, in buckets: a bucket closes once it
// holds its cap's bytes (whole weights, as DDP's do).
void DataParallel::build_buckets(Stage& stage) {
  const auto params = stage.parameters();
  if (params.empty()) return;
  const int s = stage.index();
  Buckets& b = buckets_[s];
  const auto cap = [&](std::size_t index) {
    if (index == 0 && first_bucket_bytes_ > 0) return first_bucket_bytes_;
    return bucket_bytes_ > 0 ? bucket_bytes_ : std::numeric_limits<double>::infinity();
  };
  double filled = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    if (b.params.empty() || filled >= cap(b.params.size() - 1)) {
      b.params.emplace_back();
      filled = 0;
    }
    b.params.back().push_back(*it);
    const c10::TensorImpl* impl = it->unsafeGetTensorImpl();
    b.bucket_of[impl] = b.params.size() - 1;
    filled += static_cast<double>(it->nbytes());
    torch::autograd::impl::set_post_acc_grad_hooks(*it, std::make_unique<GradientMade>([this, s, impl] { on_gradient(s, impl); }));
  }
}

// This step's reductions of the stage's buckets: none posted yet.
void DataParallel::restart_buckets(Buckets& b) {
  b.missing.clear();
  for (const auto& bucket : b.params) b.missing.push_back(static_cast<int>(bucket.size()));
  b.next = 0;
  b.flats.clear();
  b.works.clear();
  b.in_backward = 0;
}

void DataParallel::arm_buckets(int stage) {
  const auto it = buckets_.find(stage);
  if (it == buckets_.end()) return;
  restart_buckets(it->second);
  it->second.armed_at = comm_.now();
  it->second.armed = true;
}

void DataParallel::on_gradient(int stage, const c10::TensorImpl* param) {
  Buckets& b = buckets_.at(stage);
  if (!b.armed) return;
  int& missing = b.missing.at(b.bucket_of.at(param));
  if (missing > 0 && --missing == 0) post_buckets(b, false);
}

void DataParallel::disarm_buckets(int stage) {
  const auto it = buckets_.find(stage);
  if (it == buckets_.end() || !it->second.armed) return;
  post_buckets(it->second, true);
  it->second.armed = false;
}

// Posts, in bucket order (the order every replica posts them in), the
// buckets whose gradients are all made (all: every one left).
void DataParallel::post_buckets(Buckets& b, bool all) {
  while (b.next < b.params.size() && (all || b.missing.at(b.next) == 0)) {
    b.flats.push_back(flat_gradients(b.params[b.next], 1));
    at::Tensor unused;
    b.works.push_back(start_collective(*group_, schedule::CollectiveAlgorithm::RingAllReduce, b.flats.back(), unused));
    if (!all) ++b.in_backward;
    ++b.next;
  }
}

void DataParallel::step_buckets(Stage& stage, Buckets& b) {
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < b.flats.size(); ++k) {
    b.works.at(k)->wait();
    gradients_from(b.params.at(k), b.flats[k].div_(where_.data));
  }
  b.flats.clear();
  b.works.clear();
  stage.step();
}

std::map<int, std::pair<int, int>> DataParallel::bucket_counts() const {
  std::map<int, std::pair<int, int>> out;
  for (const auto& [s, b] : buckets_) out[s] = {static_cast<int>(b.params.size()), b.in_backward};
  return out;
}

ShardedStage* DataParallel::sharded_stage(int stage) {
  const auto it = zero_stages_.find(stage);
  return it == zero_stages_.end() ? nullptr : it->second.get();
}

LayerHooks* DataParallel::hooks(int stage) { return zero_.level == 3 ? sharded_stage(stage) : nullptr; }

void DataParallel::backward_begin(int stage, bool weight_gradients) {
  if (auto* z = sharded_stage(stage)) z->backward_begin(weight_gradients);
}

void DataParallel::backward_end(int stage) {
  if (auto* z = sharded_stage(stage)) z->backward_end();
}

void DataParallel::microbatch_done(int stage) {
  if (auto* z = sharded_stage(stage)) z->microbatch_done();
}

double DataParallel::gather_wait_s() const {
  double s = 0;
  for (const auto& [_, z] : zero_stages_) s += z->gather_wait_s();
  return s;
}

void DataParallel::gather_weights() {
  for (auto& [_, z] : zero_stages_) z->gather_all();
}

DataParallel::Gathers DataParallel::step_gathers() const {
  Gathers out = step_gathers_;  // ZeRO-1's
  for (const auto& [_, z] : zero_stages_) {  // ZeRO-2's
    out.calls += z->step_gathers().calls;
    out.seconds += z->step_gathers().seconds;
    out.part_bytes += z->step_gathers().part_bytes;
  }
  return out;
}

int DataParallel::unshard(int stage) {
  ShardedStage* z = sharded_stage(stage);
  if (z == nullptr) return -1;
  if (unsharding_.count(stage)) throw Error("UNSHARD of stage " + std::to_string(stage) + " twice before it computed");
  const double start = comm_.now();
  auto works = z->unshard();
  if (works.empty()) return -1;
  const int id = static_cast<int>(records_.size());
  Record& rec = records_.emplace_back();
  rec.start = start;
  rec.end = std::make_shared<std::atomic<double>>(start);
  // Its end, when the gathers complete (their errors are the compute's to report).
  unsharding_[stage] = {id, std::thread([works = std::move(works), end = rec.end, comm = &comm_] { note_end(works, end, *comm); })};
  return id;
}

void DataParallel::reshard(int stage) {
  if (auto* z = sharded_stage(stage)) z->reshard();
}

void DataParallel::gathered(int stage) {
  if (auto* z = sharded_stage(stage)) z->gathered();
  const auto it = unsharding_.find(stage);
  if (it == unsharding_.end()) return;
  // Its gathers are done: whichever of this thread and the watcher saw it
  // first (on a busy host either may be scheduled late) says when.
  const double seen = comm_.now();
  auto& [id, watcher] = it->second;
  if (watcher.joinable()) watcher.join();
  const auto& end = records_.at(static_cast<std::size_t>(id)).end;
  end->store(std::min(end->load(), seen));
  unsharding_.erase(it);
}

DataParallel::~DataParallel() {
  // Leaving with a reduction in flight (an error elsewhere): its watcher ends with the group's timeout.
  for (auto& [_, p] : pending_) {
    if (p.watcher && p.watcher->joinable()) p.watcher->detach();
  }
  for (auto& [_, u] : unsharding_) {
    if (u.second.joinable()) u.second.detach();
  }
}

void DataParallel::begin_step() {
  if (pending_.empty()) records_.clear();
}

int DataParallel::reduce(Stage& stage) {
  const int id = static_cast<int>(records_.size());
  Record& rec = records_.emplace_back();
  rec.start = comm_.now();
  rec.end = std::make_shared<std::atomic<double>>(rec.start);
  if (!group_) return id;
  if (pending_.count(stage.index())) {
    throw Error("REDUCE_GRAD of stage " + std::to_string(stage.index()) + " twice before its STEP");
  }
  Pending p;
  p.id = id;
  if (ShardedStage* z = sharded_stage(stage.index())) {
    z->reduce();
    rec.bytes = z->step_bytes();
    stage_bytes_[stage.index()] = rec.bytes;
    p.works = z->in_flight();
  } else if (const auto b = buckets_.find(stage.index()); b != buckets_.end()) {
    if (b->second.armed_at < 0) {
      // No backward before it on this rank posted them this step: every bucket now.
      restart_buckets(b->second);
      post_buckets(b->second, true);
    } else {
      // As simulated, the reduction runs from the start of the backward that posted them.
      rec.start = b->second.armed_at;
    }
    b->second.armed_at = -1;
    rec.bytes = 0;
    for (const auto& f : b->second.flats) rec.bytes += static_cast<std::int64_t>(f.nbytes());
    stage_bytes_[stage.index()] = rec.bytes;
    p.works = b->second.works;
  } else if (!post_flat(stage, p, rec)) {
    return id;
  }
  rec.end->store(rec.start);
  // Its end, when the collectives complete: a thread waits for them (their
  // errors, if any, are the STEP's to report).
  p.watcher = std::make_shared<std::thread>([works = p.works, end = rec.end, comm = &comm_] { note_end(works, end, *comm); });
  pending_[stage.index()] = std::move(p);
  return id;
}

// The stage's gradients as one flat buffer, all-reduced (ZeRO-1:
// reduce-scattered) into `p`; false where the stage has no weights.
bool DataParallel::post_flat(Stage& stage, Pending& p, Record& rec) {
  const auto params = where_.expert > 1 ? stage.replicated() : stage.parameters();
  if (params.empty()) return false;
  check_one_dtype(stage, params);
  p.flat = flat_gradients(params, zero1() ? where_.shard_size() : 1);
  rec.bytes = static_cast<std::int64_t>(p.flat.nbytes());
  if (where_.expert > 1) {
    // The experts this replica holds: summed over the replicas that hold
    // them too (none where E = D: every token's gradient came back to them
    // through the all-to-alls already).
    const auto experts = stage.routed_experts();
    if (!experts.empty()) p.experts = flat_gradients(experts, 1);
    if (!experts.empty() && expert_peers_) {
      at::Tensor unused;
      p.works.push_back(start_collective(*expert_peers_, schedule::CollectiveAlgorithm::RingAllReduce, p.experts, unused));
      rec.bytes += static_cast<std::int64_t>(p.experts.nbytes());
    }
  }
  stage_bytes_[stage.index()] = rec.bytes;
  if (zero1()) p.shard = at::empty({p.flat.numel() / where_.shard_size()}, p.flat.options());
  p.works.push_back(start_collective(*group_, zero1() ? schedule::CollectiveAlgorithm::RingReduceScatter
                                                               : schedule::CollectiveAlgorithm::RingAllReduce,
                                     p.flat, p.shard));
  return true;
}

void DataParallel::wait(Stage& stage) {
  const auto it = pending_.find(stage.index());
  if (it == pending_.end()) return;
  if (it->second.watcher->joinable()) it->second.watcher->join();
  for (const auto& w : it->second.works) w->wait();  // rethrows a failed collective (a replica gone)
}

void DataParallel::step(Stage& stage) {
  const auto it = pending_.find(stage.index());
  if (ShardedStage* z = sharded_stage(stage.index())) {
    if (it != pending_.end()) pending_.erase(it);
    z->step();
    return;
  }
  if (const auto b = buckets_.find(stage.index()); b != buckets_.end() && it != pending_.end()) {
    pending_.erase(it);
    step_buckets(stage, b->second);
    return;
  }
  if (it == pending_.end()) {
    stage.step();
    return;
  }
  Pending p = std::move(it->second);
  pending_.erase(it);
  torch::NoGradGuard no_grad;
  const double d = where_.data;
  if (zero1()) {
    // HSDP: the group's shard summed over the shard groups (every replica's
    // gradients in), here at the STEP, where every replica comes in order.
    if (across_) all_reduce_across(*across_, p.shard);
    update_shard(stage, p.shard.div_(d));
    return;
  }
  if (where_.expert > 1) {
    gradients_from(stage.replicated(), p.flat.div_(d));
    if (p.experts.defined()) gradients_from(stage.routed_experts(), p.experts.div_(d));
  } else {
    gradients_from(stage.parameters(), p.flat.div_(d));
  }
  stage.step();
}

void DataParallel::update_shard(Stage& stage, const at::Tensor& shard_grad) {
  auto params = stage.parameters();
  Sharded& sh = sharded_[stage.index()];
  const int parts = where_.shard_size();
  if (!sh.optimizer) {
    sh.chunk = shard_grad.numel();
    const at::Tensor flat = flat_weights(params, sh.chunk * parts);
    // The shard's master copy is fp32 whatever the weights' precision (as
    // Megatron-LM's distributed optimizer keeps it).
    sh.weights = flat.narrow(0, sh.chunk * where_.shard_index(), sh.chunk).to(at::kFloat).clone().requires_grad_(true);
    sh.optimizer = make_optimizer(zero_.optimizer, {sh.weights}, zero_.lr);
  }
  sh.weights.mutable_grad() = shard_grad.to(at::kFloat);
  sh.optimizer->step();
  sh.weights.mutable_grad() = at::Tensor();
  at::Tensor gathered = at::empty({sh.chunk * parts}, shard_grad.options().requires_grad(false));
  at::Tensor mine = sh.weights.detach().to(shard_grad.scalar_type());
  const double posted = comm_.now();
  start_collective(*group_, schedule::CollectiveAlgorithm::RingAllGather, mine, gathered)->wait();
  ++step_gathers_.calls;
  step_gathers_.seconds += comm_.now() - posted;
  step_gathers_.part_bytes += static_cast<double>(mine.nbytes());
  std::int64_t offset = 0;
  for (auto& w : params) {
    w.detach().copy_(gathered.narrow(0, offset, w.numel()).view_as(w));
    offset += w.numel();
  }
  stage.advance();
}

std::pair<double, double> DataParallel::times(int id) const {
  const Record& r = records_.at(static_cast<std::size_t>(id));
  return {r.start, std::max(r.start, r.end->load())};
}

std::int64_t DataParallel::bytes(int id) const { return records_.at(static_cast<std::size_t>(id)).bytes; }

}  // namespace pipetwin::exec
