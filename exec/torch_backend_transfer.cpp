// TorchBackend's transfers: c10d sends and receives (Gloo's posted ahead), and
// the messages between stages of the same rank.
#include "exec/torch_backend.hpp"

#include <optional>

#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace ps = pipetwin::schedule;

// Distinct for every message of two consecutive steps, with room for
// kMaxCutTensors tensors per message.
int TorchBackend::tag(const ps::MessageKey& key) const {
  const auto& p = config_.program;
  const int s = p.num_stages(), m = p.num_microbatches;
  return ((((step_ % 2) * m + key.microbatch.value) * s + key.to_stage.value) * 2 + (key.forward ? 0 : 1)) * kMaxCutTensors;
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

}  // namespace pipetwin::exec
