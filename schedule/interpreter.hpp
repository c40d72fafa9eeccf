// The one interpreter of a rank's action list. It owns the bookkeeping (which
// message a receive waits for, what each stage has stashed, when weights
// change version); backends only carry actions out:
//
//        Program ── RankInterpreter(rank) ──step()──> Backend::compute / send / recv
//
// A blocking backend (a SimGrid actor, a real process) returns true from recv
// once the data is there; a polling backend (the dry run) returns false and
// the interpreter stays on that action until asked again.
#pragma once

#include <cstddef>
#include <array>
#include <map>
#include <utility>
#include <vector>

#include "schedule/program.hpp"

namespace pipetwin::schedule {

// What a transfer carries: the tensor of micro-batch `microbatch` for stage
// `to_stage`, forward (activations) or backward (gradients).
struct MessageKey {
  bool forward = true;
  StageId to_stage;
  MicrobatchId microbatch;
  friend auto operator<=>(const MessageKey&, const MessageKey&) = default;
};

inline MessageKey message_of(const Action& t) {
  const int m = t.microbatch ? t.microbatch->value : 0;
  switch (t.op) {
    case Op::SEND_F: return {true, StageId{t.stage.value + 1}, MicrobatchId{m}};
    case Op::RECV_F: return {true, t.stage, MicrobatchId{m}};
    case Op::SEND_B: return {false, StageId{t.stage.value - 1}, MicrobatchId{m}};
    default: return {false, t.stage, MicrobatchId{m}};  // RECV_B
  }
}
// The rank at the other end of a SEND_* or RECV_*.
RankId peer_of(const Program& program, const Action& transfer);
// The send that a receive expects, e.g. 0SEND_F3 for 1RECV_F3.
Action matching_send(const Action& recv);
Action matching_recv(const Action& send);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual void compute(RankId rank, const Action& action) = 0;  // F B I W R STEP REDUCE_GRAD
  virtual void send(RankId rank, const Action& action, RankId peer) = 0;
  virtual bool recv(RankId rank, const Action& action, RankId peer) = 0;
};

// Micro-batches stashed by each stage along a rank's order: full activations
// (what backward needs) or, for checkpointed micro-batches, only the inputs;
// and, for weight stashing, the weight versions that in-flight micro-batches hold.
class StashTracker {
 public:
  explicit StashTracker(const Program& program);
  void apply(const Action& action);

  struct Stage {
    int full = 0, inputs = 0;            // now
    int weight_only = 0;                 // of full: its I ran, its W not yet
    int peak_full = 0, peak_inputs = 0;  // peak of each
    int peak_total = 0;                  // peak of full + inputs
    int version = 0;                     // optimizer steps taken
    int peak_versions = 1;               // distinct versions alive at the peak
    // Every (full - weight_only, weight_only, inputs) state not dominated by
    // another one seen: the peak in bytes is the largest whole * activation +
    // weight_only * weight-gradient stash + inputs * input over it.
    std::vector<std::array<int, 3>> frontier{{0, 0, 0}};
    std::array<int, 3> state() const { return {full - weight_only, weight_only, inputs}; }
  };
  const Stage& stage(StageId s) const { return stages_.at(s.value); }

 private:
  void set_version(int stage, int microbatch, int version);

  const Program& program_;
  std::vector<Stage> stages_;
  std::vector<std::vector<int>> version_of_;  // [stage][micro-batch], -1 when none
  std::vector<std::map<int, int>> held_;      // [stage]: version -> micro-batches holding it
};

class RankInterpreter {
 public:
  RankInterpreter(const Program& program, RankId rank);

  enum class Status { Progressed, Blocked, Done };
  Status step(Backend& backend);

  RankId rank() const { return rank_; }
  std::size_t position() const { return position_; }
  bool done() const { return position_ == actions_.size(); }
  const Action& next() const { return actions_.at(position_); }

 private:
  const Program& program_;
  RankId rank_;
  const std::vector<Action>& actions_;
  std::size_t position_ = 0;
};

}  // namespace pipetwin::schedule
