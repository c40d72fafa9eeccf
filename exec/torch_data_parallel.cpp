// DataParallel: a stage's gradient reduction over its data group, and ZeRO-1.
#include "exec/torch_data_parallel.hpp"

#include "exec/torch_collectives.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

// The stage's gradients as one flat buffer (a missing gradient is zeros),
// padded with zeros to a multiple of `parts`.
at::Tensor flatten_grads(const std::vector<at::Tensor>& params, std::int64_t parts) {
  std::vector<at::Tensor> flat;
  std::int64_t n = 0;
  for (const auto& p : params) {
    const at::Tensor& g = p.grad();
    flat.push_back(g.defined() ? g.reshape(-1) : at::zeros({p.numel()}, p.options().requires_grad(false)));
    n += p.numel();
  }
  const std::int64_t padded = (n + parts - 1) / parts * parts;
  if (padded > n) flat.push_back(at::zeros({padded - n}, params.front().options().requires_grad(false)));
  return at::cat(flat);
}

at::Tensor flatten_weights(const std::vector<at::Tensor>& params, std::int64_t padded) {
  std::vector<at::Tensor> flat;
  std::int64_t n = 0;
  for (const auto& p : params) {
    flat.push_back(p.detach().reshape(-1));
    n += p.numel();
  }
  if (padded > n) flat.push_back(at::zeros({padded - n}, params.front().options().requires_grad(false)));
  return at::cat(flat);
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

DataParallel::DataParallel(Comm& comm, const Placement& where, bool shard_optimizer, models::Optimizer optimizer,
                           double lr)
    : comm_(comm), where_(where), shard_optimizer_(shard_optimizer), optimizer_(optimizer), lr_(lr) {
  if (where.data <= 1) return;
  const std::string name = "data/" + std::to_string(where.pipeline_rank) + "/" + std::to_string(where.member);
  group_ = comm.subgroup(name, where.data_group(where.pipeline_rank));
}

DataParallel::~DataParallel() {
  // Leaving with a reduction in flight (an error elsewhere): its watcher ends with the group's timeout.
  for (auto& [_, p] : pending_) {
    if (p.watcher && p.watcher->joinable()) p.watcher->detach();
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
  const auto params = stage.parameters();
  if (params.empty()) return id;
  check_one_dtype(stage, params);
  Pending p;
  p.id = id;
  p.flat = flatten_grads(params, shard_optimizer_ ? where_.data : 1);
  rec.bytes = static_cast<std::int64_t>(p.flat.nbytes());
  stage_bytes_[stage.index()] = rec.bytes;
  if (shard_optimizer_) p.shard = at::empty({p.flat.numel() / where_.data}, p.flat.options());
  p.work = start_collective(*group_, shard_optimizer_ ? schedule::CollectiveAlgorithm::RingReduceScatter
                                                      : schedule::CollectiveAlgorithm::RingAllReduce,
                            p.flat, p.shard);
  // Its end, when the collective completes: a thread waits for it (its
  // error, if any, is the STEP's to report).
  p.watcher = std::make_shared<std::thread>([work = p.work, end = rec.end, comm = &comm_] {
    try {
      work->wait();
      end->store(comm->now());
    } catch (const std::exception&) {
    }
  });
  pending_[stage.index()] = std::move(p);
  return id;
}

void DataParallel::wait(Stage& stage) {
  const auto it = pending_.find(stage.index());
  if (it == pending_.end()) return;
  if (it->second.watcher->joinable()) it->second.watcher->join();
  it->second.work->wait();  // rethrows a failed collective (a replica gone)
}

void DataParallel::step(Stage& stage) {
  const auto it = pending_.find(stage.index());
  if (it == pending_.end()) {
    stage.step();
    return;
  }
  Pending p = std::move(it->second);
  pending_.erase(it);
  torch::NoGradGuard no_grad;
  const double d = where_.data;
  if (shard_optimizer_) {
    update_shard(stage, p.shard.div_(d));
    return;
  }
  p.flat.div_(d);
  std::int64_t offset = 0;
  for (auto& w : stage.parameters()) {
    w.mutable_grad() = p.flat.narrow(0, offset, w.numel()).view_as(w).clone();
    offset += w.numel();
  }
  stage.step();
}

void DataParallel::update_shard(Stage& stage, const at::Tensor& shard_grad) {
  auto params = stage.parameters();
  Sharded& sh = sharded_[stage.index()];
  if (!sh.optimizer) {
    sh.chunk = shard_grad.numel();
    const at::Tensor flat = flatten_weights(params, sh.chunk * where_.data);
    // The shard's master copy is fp32 whatever the weights' precision (as
    // Megatron-LM's distributed optimizer keeps it).
    sh.weights = flat.narrow(0, sh.chunk * where_.replica, sh.chunk).to(at::kFloat).clone().requires_grad_(true);
    sh.optimizer = make_optimizer(optimizer_, {sh.weights}, lr_);
  }
  sh.weights.mutable_grad() = shard_grad.to(at::kFloat);
  sh.optimizer->step();
  sh.weights.mutable_grad() = at::Tensor();
  at::Tensor gathered = at::empty({sh.chunk * where_.data}, shard_grad.options().requires_grad(false));
  at::Tensor mine = sh.weights.detach().to(shard_grad.scalar_type());
  start_collective(*group_, schedule::CollectiveAlgorithm::RingAllGather, mine, gathered)->wait();
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
