// The timed evaluator: a ready queue of ranks; a rank runs until it blocks on
// a receive whose message is not posted yet; the matching send wakes it up.
// Messages live in a flat array indexed by (direction, stage, micro-batch):
// O(actions) overall with no allocation per action beyond the Timeline.
#include "schedule/dry_run.hpp"

#include <algorithm>
#include <deque>
#include <limits>

#include "schedule/error.hpp"
#include "schedule/interpreter.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::schedule {

double StageCosts::of(Op op) const {
  switch (op) {
    case Op::F: return forward_s;
    case Op::B: return backward_s;
    case Op::I: return input_grad_s;
    case Op::W: return weight_grad_s;
    case Op::R: return recompute_s;
    case Op::STEP: return step_s;
    default: return 0;
  }
}

double StageCosts::tp_share(Op op) const {
  switch (op) {
    case Op::F:
    case Op::R: return tp_forward_s;
    case Op::B:
    case Op::I: return tp_backward_s;
    default: return 0;
  }
}

double StageCosts::a2a_share(Op op) const {
  switch (op) {
    case Op::F: return a2a_forward_s;
    case Op::R: return a2a_recompute_s;
    case Op::B:
    case Op::I: return a2a_backward_s;
    default: return 0;
  }
}

int StageCosts::exchanges(Op op) const {
  switch (op) {
    case Op::F:
    case Op::B:
    case Op::I: return a2a_exchanges;
    case Op::R: return a2a_recompute_exchanges;
    default: return 0;
  }
}

StageCosts OpDurations::stage() const {
  StageCosts c;
  c.forward_s = forward, c.backward_s = backward, c.input_grad_s = input_grad, c.weight_grad_s = weight_grad;
  c.recompute_s = recompute, c.step_s = step;
  c.activation_transfer_s = transfer, c.gradient_transfer_s = transfer;
  return c;
}

namespace {

constexpr double kNotPosted = -std::numeric_limits<double>::infinity();

class EvalBackend final : public Backend {
 public:
  EvalBackend(const Program& p, const std::vector<StageCosts>& costs)
      : costs_(costs), S_(p.num_stages()), M_(p.num_microbatches), clock_(p.num_ranks, 0.0), alone_(p.num_ranks, 0.0),
        alone_a2a_(p.num_ranks, 0.0),
        posted_(2 * static_cast<std::size_t>(S_) * M_, kNotPosted), waiting_(posted_.size(), -1) {
    timeline_.ranks.resize(p.num_ranks);
    for (int r = 0; r < p.num_ranks; ++r) timeline_.ranks[r].reserve(p.ranks[r].size());
  }

  void compute(RankId r, const Action& a) override {
    const StageCosts& c = costs_[a.stage.value];
    record(r, a, clock_[r.value], c.of(a, alone_[r.value], alone_a2a_[r.value]));
    alone_[r.value] = c.of(a);
    alone_a2a_[r.value] = std::min(alone_[r.value], c.a2a_share(a.op));
  }

  void send(RankId r, const Action& a, RankId) override {
    const StageCosts& c = costs_[a.stage.value];
    const double start = clock_[r.value];
    const double flight = c.flight_s(a.op);
    record(r, a, start, c.send_s(a.op) + (c.blocking_sends ? flight : 0));
    const std::size_t slot = slot_of(message_of(a));
    posted_[slot] = start + c.send_s(a.op) + flight;
    if (waiting_[slot] >= 0) {
      woken_.push_back(waiting_[slot]);
      waiting_[slot] = -1;
    }
  }

  bool recv(RankId r, const Action& a, RankId) override {
    const std::size_t slot = slot_of(message_of(a));
    if (posted_[slot] == kNotPosted) {
      waiting_[slot] = r.value;
      return false;
    }
    const double start = clock_[r.value];
    const StageCosts& c = costs_[a.stage.value];
    const double take = a.op == Op::RECV_F ? c.activation_recv_s : c.gradient_recv_s;
    // A receive that waited for its message ends with its arrival (and the
    // wake-up); its own cost ran while it waited.
    record(r, a, start, std::max(take, posted_[slot] + c.recv_wake_s - start));
    return true;
  }

  std::vector<int>& woken() { return woken_; }
  Timeline take_timeline() { return std::move(timeline_); }

 private:
  std::size_t slot_of(const MessageKey& k) const {
    return (static_cast<std::size_t>(k.forward ? 0 : 1) * S_ + k.to_stage.value) * M_ + k.microbatch.value;
  }
  void record(RankId r, const Action& a, double start, double duration) {
    clock_[r.value] = start + duration;
    timeline_.ranks[r.value].push_back({a, start, start + duration});
  }

  const std::vector<StageCosts>& costs_;
  int S_, M_;
  std::vector<double> clock_;
  std::vector<double> alone_;   // each rank's last compute action's own time (what an overlapped one overlaps)
  std::vector<double> alone_a2a_;  // and of it its all-to-alls
  std::vector<double> posted_;  // arrival time per message, kNotPosted until sent
  std::vector<int> waiting_;    // the rank blocked on each message, -1 if none
  std::vector<int> woken_;
  Timeline timeline_;
};

}  // namespace

DryRun evaluate(const Program& input, const std::vector<StageCosts>& costs) {
  const bool complete = input.has_transfers();
  const Program lowered = complete ? Program{} : lower(input);
  const Program& program = complete ? input : lowered;
  if (static_cast<int>(costs.size()) != program.num_stages()) {
    throw Error("evaluate: " + std::to_string(costs.size()) + " stage costs for " +
                std::to_string(program.num_stages()) + " stages");
  }
  EvalBackend backend(program, costs);
  std::vector<RankInterpreter> ranks;
  std::deque<int> ready;
  for (int r = 0; r < program.num_ranks; ++r) {
    ranks.emplace_back(program, RankId{r});
    ready.push_back(r);
  }
  while (!ready.empty()) {
    RankInterpreter& rank = ranks[ready.front()];
    ready.pop_front();
    while (rank.step(backend) == RankInterpreter::Status::Progressed) {
      auto& woken = backend.woken();
      for (const int w : woken) ready.push_back(w);
      woken.clear();
    }
  }
  DryRun result;
  result.timeline = backend.take_timeline();
  for (const auto& rank : ranks) {
    if (!rank.done()) {
      result.blocked.push_back({rank.rank(), rank.position(), rank.next(), matching_send(rank.next())});
    }
  }
  return result;
}

DryRun dry_run(const Program& program, const OpDurations& durations) {
  return evaluate(program, std::vector<StageCosts>(program.num_stages(), durations.stage()));
}

}  // namespace pipetwin::schedule
