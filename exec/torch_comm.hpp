// A rank's connections (internal to exec/: includes LibTorch): the TCPStore
// (rendezvous, clock alignment, gathering results) and the c10d process
// group that carries activations and gradients.
//
//   Gloo (CPU):  one group; every message has its own tag, so receives may be
//                posted in any order.
//   NCCL (CUDA): NCCL ignores tags and pairs sends and receives in issue
//                order on one stream per peer pair; four groups, one per
//                channel kind (activations, gradients) and direction (lower
//                -> higher rank, higher -> lower), keep a pair's channels
//                apart, and the executor checks that each channel's receives
//                come in its sends' order (schedule/channels.hpp).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "exec/run.hpp"

namespace pipetwin::exec {

class Comm {
 public:
  // Rendezvous: connects to (or, for rank 0 without a launcher, hosts) the
  // store, waits for every rank, aligns the clocks, creates the group.
  Comm(const RankEnv& env, bool cuda, std::chrono::milliseconds timeout);
  // NCCL: shuts the groups down (their communicators are finalized: every
  // queued operation completes); aborts them instead while an exception
  // unwinds, so that a lost peer cannot hold this rank.
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }

  // Point-to-point. send() returns at once; keep the work (and the tensors)
  // until it completes. recv() returns when the data is there (CPU) or is
  // ordered before later work on the current stream (CUDA). `activations`:
  // the message is a forward's output (else a backward's input gradient),
  // which picks its channel on NCCL.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag, bool activations);
  void recv(std::vector<at::Tensor>& tensors, int src, int tag, bool activations);
  // CPU (Gloo) only: posts the receive and returns at once; wait() on the
  // work. Gloo moves a message only once its receive is posted (the sender
  // waits for the receiver's ready notice), so posting ahead lets the data
  // flow while this rank computes.
  c10::intrusive_ptr<c10d::Work> post_recv(std::vector<at::Tensor>& tensors, int src, int tag);

  // A process group of its own over `members` (devices, this one among
  // them, in their group order) for a data or tensor group's collectives:
  // Gloo, or NCCL on CUDA. `name` keeps its rendezvous keys apart; only the
  // members call it.
  c10::intrusive_ptr<c10d::Backend> subgroup(const std::string& name, const std::vector<int>& members) const;

  // This rank's clock, aligned to rank 0's (seconds).
  double now() const;
  double clock_offset() const { return offset_s_; }
  double clock_uncertainty() const { return uncertainty_s_; }

  // Small values through the store (results, errors). fetch() blocks until set.
  void publish(const std::string& key, const std::string& value);
  std::string fetch(const std::string& key);
  void barrier(const std::string& name);

  std::string host() const { return host_; }

 private:
  void join(std::chrono::milliseconds timeout);
  // The group that carries messages of one kind from `from` to `to`.
  c10d::Backend& channel(int from, int to, bool activations) const;
  void align_clocks();

  RankEnv env_;
  bool cuda_ = false;
  std::string host_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> group_;                 // Gloo
  std::array<c10::intrusive_ptr<c10d::Backend>, 4> nccl_;  // activations up, down; gradients up, down
  double offset_s_ = 0, uncertainty_s_ = 0;
  std::chrono::milliseconds timeout_{0};
};

// Seconds on this process's monotonic clock.
double monotonic_now();

}  // namespace pipetwin::exec
