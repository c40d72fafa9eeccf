// Expert parallelism's all-to-alls as SimGrid messages (internal to sim/:
// includes SimGrid; called from a rank's actor in the running engine).
//
// Each routed layer's dispatch and combine in an F, B, I or R is an
// all-to-all between the E replicas of the expert group, every member
// sending StageCosts::a2a_bytes / E to each other at once (the collectives
// table's row, on the platform's routes), so that links shared with other
// traffic slow them. An action alone cuts its compute evenly around its
// all-to-alls. An OVERLAP_F_B runs the two halves' all-to-alls on a stream
// of their own (DeepSeek-V3's and Megatron-LM's communication stream), the
// first half's then the second's, beside the compute: the pair takes its
// closed form (StageCosts::of), and what the messages take beyond their
// closed forms lengthens it as it would max(the computes, the all-to-alls,
// each half's compute and all-to-alls in turn).
#pragma once

#include <functional>
#include <memory>
#include <simgrid/s4u.hpp>

#include "schedule/dry_run.hpp"
#include "sim/simulator.hpp"

namespace pipetwin::sim {

class ExpertExchanges {
 public:
  // `on`: within kMaxExchangeSends (exchange_sends, counted once a replay).
  ExpertExchanges(const SimInput& in, int replica, bool on) : in_(in), replica_(replica), on_(on) {}

  // The all-to-alls of `op` of a stage with `costs` that run as messages:
  // on a cluster or a PCIe tree, whose devices have ports that all their
  // flows cross, over E > 1 replicas with the tensor group not folded in.
  // 0 elsewhere (the actions' times hold their closed forms).
  int count(const schedule::StageCosts& costs, schedule::Op op) const;
  // Action `a`, taking `d` (its all-to-alls' closed form included), alone:
  // `run` its compute in pieces around its all-to-alls.
  void inline_run(const schedule::Action& a, double d, const std::function<void(double)>& run) const;
  // `a` opens an OVERLAP_F_B whose `next` half is overlapped with it, and
  // either half has all-to-alls as messages.
  bool opens_pair(const schedule::Action& a, const schedule::Action& next) const;
  // The first half: its stream started; its timed action, its own time.
  schedule::TimedAction open(const schedule::Action& a, const schedule::Action& next);
  bool pairing() const { return pair_ != nullptr; }
  // The second half, adding `d` by the closed form: waits for the pair's end.
  schedule::TimedAction close(const schedule::Action& b, double d);

 private:
  struct Pair;
  void all_to_alls(const schedule::Action& a, int n) const;  // n of a's, one after the other
  const SimInput& in_;
  int replica_ = 0;
  bool on_ = true;  // within kMaxExchangeSends
  std::shared_ptr<Pair> pair_;
};

}  // namespace pipetwin::sim
