// TorchBackend: the rank's stages built, its steps begun and ended, and each
// compute action dispatched and timed (the actions themselves:
// torch_backend_compute.cpp; the transfers: torch_backend_transfer.cpp).
#include "exec/torch_backend.hpp"

#include <cstdlib>
#include <tuple>

#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace ps = pipetwin::schedule;

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
    dp_ = std::make_unique<DataParallel>(comm, where_, p.zero, p.reshard_after_forward, config.optimizer, config.lr, meter);
    dp_->set_buckets(config.bucket_bytes, config.first_bucket_bytes);
    // Each stage's last backward action (B or W) before its REDUCE_GRAD on
    // this rank: its buckets go out while it runs.
    const auto& actions = p.ranks.at(where_.pipeline_rank);
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (actions[i].op == ps::Op::UNSHARD) unshards_.insert(actions[i].stage.value);
      const auto k = actions[i].op == ps::Op::REDUCE_GRAD ? ps::backward_before(actions, i) : std::nullopt;
      if (!k) continue;
      const auto& b = actions[*k];
      bucket_leads_.insert({static_cast<int>(b.op), b.stage.value, b.microbatch ? b.microbatch->value : 0});
    }
  }
  ExpertGroup expert_group;  // after the data group's
  if (where_.expert > 1) {
    check_moe_run(config.model, where_.expert);
    expert_group = comm.subgroup("expert/" + std::to_string(where_.pipeline_rank) + "/" + std::to_string(where_.member) +
                                     "/" + std::to_string(where_.replica - where_.expert_index()),
                                 where_.expert_group(where_.pipeline_rank));
  }
  for (const auto s : p.stages_of(ps::RankId{where_.pipeline_rank})) {
    const int versions = p.weight_versions.empty() ? 1 : p.weight_versions.at(s.value);
    stages_[s.value] = std::make_unique<Stage>(config.model, s.value, p.partition.at(s.value), p.is_last_stage(s),
                                               versions, config.seed, device, config.optimizer, config.lr, tensor_group,
                                               p.sequence_parallel, expert_group);
    stages_[s.value]->set_recompute(p.recompute == ps::RecomputePolicy::Selective, config.checkpoint);
    if (dp_) dp_->adopt(*stages_[s.value]);
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

void TorchBackend::compute(ps::RankId, const ps::Action& a) {
  const int s = a.stage.value, mb = a.microbatch ? a.microbatch->value : 0;
  // The wait for the stage's reduction is idle time, not the step's.
  if (a.op == ps::Op::STEP && dp_) dp_->wait(stage(s));
  // A stage its list gathers by UNSHARD: the gather waited for before it
  // computes, as PyTorch's runtime does (idle time too).
  if (dp_ && ps::is_compute(a.op) && unshards_.count(s) > 0) dp_->gathered(s);
  const double cpu_before = thread_cpu_seconds();
  const bool lead = dp_ && bucket_leads_.count({static_cast<int>(a.op), s, mb}) > 0;
  if (lead) dp_->arm_buckets(s);
  const std::size_t token = clock_->start();
  switch (a.op) {
    case ps::Op::F: forward(s, mb); break;
    case ps::Op::R: recompute(s, mb); break;
    case ps::Op::B: backward(s, mb, false); break;
    case ps::Op::I: backward(s, mb, true); break;
    case ps::Op::W: weight_grad(s, mb); break;
    case ps::Op::STEP: dp_ ? dp_->step(stage(s)) : stage(s).step(); break;
    // FSDP: no-ops for a data group of one replica, and below ZeRO-3 (PyTorch's for a stage without FSDP).
    case ps::Op::UNSHARD:  // timed from its post to its gathers' end, as simulated
      if (dp_) {
        if (const int id = dp_->unshard(s); id >= 0) reductions_[timed_.size()] = id;
      }
      break;
    case ps::Op::RESHARD:
      if (dp_) dp_->reshard(s);
      break;
    case ps::Op::REDUCE_GRAD:
      // A data group of one replica has nothing to reduce.
      stage(s).finish_gradients();
      if (dp_) reductions_[timed_.size()] = dp_->reduce(stage(s));
      break;
    default: throw Error(std::string(ps::op_name(a.op)) + " is not supported by pipetwin run");
  }
  clock_->stop(token);
  if (lead) dp_->disarm_buckets(s);
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

std::vector<std::pair<int, double>> TorchBackend::stage_peak_stash_bytes() const {
  std::vector<std::pair<int, double>> out;
  for (const auto& [s, _] : stages_) out.emplace_back(s, static_cast<double>(stash_peak_.count(s) ? stash_peak_.at(s) : 0));
  return out;
}

}  // namespace pipetwin::exec
