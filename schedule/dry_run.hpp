// The timed evaluator: every rank's interpreter driven by a polling backend,
// each action taking its stage's modelled time, each transfer arriving a fixed
// time after its send. Without shared resources this is the exact critical
// path of the schedule (sim/ agrees to 1e-9 there), at tens of millions of
// actions per second. With unit times it is the dry run that proves that a
// program makes progress and gives its unit-time Timeline.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "schedule/collective.hpp"
#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::schedule {

// What one micro-batch's actions cost on one stage.
struct StageCosts {
  double forward_s = 0, backward_s = 0, input_grad_s = 0, weight_grad_s = 0, recompute_s = 0, step_s = 0;
  double send_overhead_s = 0;        // sender-side cost of posting a transfer
  double send_s_per_byte = 0;        // and per byte it carries (a send that writes its data itself)
  // The sender waits until its message has arrived (a runtime that waits on
  // each send's request, as Megatron-LM's p2p of 2021 did): a SEND lasts its
  // own cost and then the flight.
  bool blocking_sends = false;
  // Receiver-side cost of its RECV_F / RECV_B when the message is already
  // there as the receive starts (asking the sender's transport for it and
  // copying it out). A receive that starts before its message arrives spends
  // it while it waits: it ends at max(start + this cost, arrival + recv_wake_s).
  double activation_recv_s = 0;
  double gradient_recv_s = 0;
  double recv_wake_s = 0;            // what a receive that waited takes after its message arrives
  double activation_bytes = 0;       // what its SEND_F carries (for sim/)
  double gradient_bytes = 0;         // what its SEND_B carries (for sim/)
  double activation_transfer_s = 0;  // its SEND_F's flight time, latency + bytes / bandwidth
  double gradient_transfer_s = 0;    // its SEND_B's flight time
  // A stage's first forward in a step (micro-batch 0's F) also reads its
  // weights back into the caches that the optimizer step evicted: this on top.
  double first_forward_extra_s = 0;
  // Data parallelism (sim/): what one device of the stage all-reduces over its
  // data group at REDUCE_GRAD (its gradients) and, with ZeRO-1, all-gathers
  // after its STEP (its updated weights). The evaluator has no network: it
  // leaves both out (REDUCE_GRAD takes no time there).
  double reduce_bytes = 0;
  double gather_bytes = 0;
  // ZeRO-3 without resharding after the forward: what one device all-gathers
  // at each of the stage's UNSHARDs (the stage's weights, whole), the stage's
  // next compute waiting for it; 0 where an UNSHARD is a no-op in time. The
  // evaluator leaves it out too.
  double unshard_bytes = 0;
  // The collective of REDUCE_GRAD (models' choice: the ring or the tree
  // all-reduce; with ZeRO-1, Program::shard_optimizer, sim/ runs the ring
  // reduce-scatter whatever this says), and the chunks that a tree pipelines
  // its bytes in.
  CollectiveAlgorithm reduce_collective = CollectiveAlgorithm::RingAllReduce;
  int reduce_chunks = 1;
  // Buckets of at most this many bytes (of reduce_bytes; 0: one), each
  // reduced from when the backward before REDUCE_GRAD has produced it
  // (models::gradient_buckets): sim/ starts them during that backward.
  double reduce_bucket_bytes = 0;
  double reduce_first_bucket_bytes = 0;  // the first bucket's apart (DDP's 1 MiB); 0: as the others
  // ZeRO-2 and 3 (Program::zero): every B or W of the stage reduce-scatters
  // its micro-batch's gradients in those buckets, one reduction after the
  // other; REDUCE_GRAD then waits for the last (sim/).
  bool reduce_each_microbatch = false;
  // Tensor parallelism: the share of forward_s (and recompute_s) and of
  // backward_s (and input_grad_s) that is the tensor group's collectives,
  // which sim/ on a shared host spends waiting, without a core.
  double tp_forward_s = 0, tp_backward_s = 0;
  // Expert parallelism: the share of forward_s, recompute_s and of
  // backward_s (and input_grad_s) that is a mixture's all-to-alls (each
  // routed block's dispatch and combine), which an OVERLAP_F_B hides under
  // the other action's compute.
  double a2a_forward_s = 0, a2a_recompute_s = 0, a2a_backward_s = 0;
  // The same all-to-alls as the messages sim/ sends over the expert group's
  // routes: an F, B or I runs a2a_exchanges of a2a_bytes each (what the
  // busiest device sends; an R a2a_recompute_exchanges), the rest of its time
  // cut evenly around them. 0: none, or only their time above (the
  // evaluator's; sim/ on a shared host, or with the tensor group folded in).
  int a2a_exchanges = 0, a2a_recompute_exchanges = 0;
  double a2a_bytes = 0;
  int exchanges(Op op) const;  // F, B and I: a2a_exchanges; R: a2a_recompute_exchanges; else 0
  double of(Op op) const;            // compute ops (F B I W R STEP)
  double tp_share(Op op) const;      // of those, the tensor group's collectives: F and R forward's, B and I backward's
  double a2a_share(Op op) const;     // and the all-to-alls: F's, R's, B's and I's
  // An OVERLAP_F_B (Action::overlapped) takes the sum of its actions' times
  // less this share of the shorter of each overlapped action and the one
  // before it: 0 runs them one after the other (the sum, what PyTorch's
  // runtime and the executor do), 1 hides the shorter under the longer. The
  // device's property (Hardware::overlap_factor), fitted by calibrate.
  // Where the two hold all-to-alls (a2a_share), each one's runs under the
  // other's compute as DualPipe's two streams do, whichever hides more: the
  // pair then takes max(their computes, their all-to-alls, either alone).
  double overlap_factor = 0;
  // The time of compute action `a` of this stage: of(a.op), and the first
  // forward's extra for micro-batch 0's F.
  double of(const Action& a) const {
    return of(a.op) + (a.op == Op::F && a.microbatch && a.microbatch->value == 0 ? first_forward_extra_s : 0);
  }
  // What `a` adds on its rank when the compute action before it took
  // `before_s` on its own, `before_a2a_s` of it its all-to-alls (of(a)
  // unless `a` is overlapped with it).
  double of(const Action& a, double before_s, double before_a2a_s = 0) const {
    const double own = of(a);
    if (!a.overlapped) return own;
    const double shared = own - overlap_factor * std::min(own, before_s);
    const double a2a = std::min(own, a2a_share(a.op));
    if (a2a <= 0 && before_a2a_s <= 0) return shared;
    const double pair = std::max({own - a2a + before_s - before_a2a_s, a2a + before_a2a_s, before_s, own});
    return std::min(shared, pair - before_s);
  }
  // What posting its SEND_F or SEND_B costs the sender.
  double send_s(Op op) const {
    return send_overhead_s + send_s_per_byte * (op == Op::SEND_F ? activation_bytes : gradient_bytes);
  }
  // The flight of its SEND_F or SEND_B.
  double flight_s(Op op) const { return op == Op::SEND_F ? activation_transfer_s : gradient_transfer_s; }
};

// Uniform costs for every stage, in the units of the dry run.
struct OpDurations {
  double forward = 1, backward = 1, input_grad = 1, weight_grad = 1, recompute = 1;
  double transfer = 0;  // from a send's post to the data being available
  double step = 0;
  StageCosts stage() const;
};

struct BlockedRank {
  RankId rank;
  std::size_t step = 0;  // index in the rank's action list
  Action action;         // the receive it is stuck on
  Action waiting_for;    // the send that never comes
};

struct DryRun {
  Timeline timeline;
  std::vector<BlockedRank> blocked;  // empty unless the program deadlocks
  bool deadlocked() const { return !blocked.empty(); }
};

// `costs` has one entry per stage. A program without transfers is lowered
// first (passes.hpp), so that data crossing ranks is waited for; the Timeline
// then holds the lowered actions.
DryRun evaluate(const Program& program, const std::vector<StageCosts>& costs);
DryRun dry_run(const Program& program, const OpDurations& durations = {});

}  // namespace pipetwin::schedule
