// Drives all RankInterpreters with a ready queue: a rank runs until it blocks
// on a receive; the matching send wakes it up. O(actions) overall.
#include "schedule/dry_run.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "schedule/interpreter.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::schedule {

double OpDurations::of(Op op) const {
  switch (op) {
    case Op::F: return forward;
    case Op::B: return backward;
    case Op::I: return input_grad;
    case Op::W: return weight_grad;
    case Op::R: return recompute;
    case Op::STEP: return step;
    default: return 0;
  }
}

namespace {

class DryRunBackend final : public Backend {
 public:
  DryRunBackend(int ranks, const OpDurations& d) : d_(d), clock_(ranks, 0.0), timeline_{} {
    timeline_.ranks.resize(ranks);
  }

  void compute(RankId r, const Action& a) override { record(r, a, clock_[r.value], d_.of(a.op)); }

  void send(RankId r, const Action& a, RankId) override {
    const MessageKey key = message_of(a);
    posted_[key] = clock_[r.value] + d_.transfer;
    record(r, a, clock_[r.value], 0);
    if (const auto it = waiting_.find(key); it != waiting_.end()) {
      woken_.push_back(it->second);
      waiting_.erase(it);
    }
  }

  bool recv(RankId r, const Action& a, RankId) override {
    const MessageKey key = message_of(a);
    const auto it = posted_.find(key);
    if (it == posted_.end()) {
      waiting_[key] = r;
      return false;
    }
    const double start = clock_[r.value];
    record(r, a, start, std::max(0.0, it->second - start));
    posted_.erase(it);
    return true;
  }

  std::vector<RankId> take_woken() { return std::exchange(woken_, {}); }
  Timeline take_timeline() { return std::move(timeline_); }

 private:
  void record(RankId r, const Action& a, double start, double duration) {
    clock_[r.value] = start + duration;
    timeline_.ranks[r.value].push_back({a, start, start + duration});
  }

  OpDurations d_;
  std::vector<double> clock_;
  Timeline timeline_;
  std::map<MessageKey, double> posted_;
  std::map<MessageKey, RankId> waiting_;
  std::vector<RankId> woken_;
};

}  // namespace

DryRun dry_run(const Program& input, const OpDurations& durations) {
  const Program lowered = input.has_transfers() ? Program{} : lower(input);
  const Program& program = input.has_transfers() ? input : lowered;
  DryRunBackend backend(program.num_ranks, durations);
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
      for (const RankId woken : backend.take_woken()) ready.push_back(woken.value);
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

}  // namespace pipetwin::schedule
