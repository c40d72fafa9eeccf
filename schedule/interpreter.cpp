// RankInterpreter, message matching and stash bookkeeping.
#include "schedule/interpreter.hpp"

#include <algorithm>

namespace pipetwin::schedule {

RankId peer_of(const Program& p, const Action& t) {
  const bool up = t.op == Op::SEND_F || t.op == Op::RECV_B;  // towards the last stage
  return p.rank_of(StageId{t.stage.value + (up ? 1 : -1)});
}

Action matching_send(const Action& recv) {
  if (recv.op == Op::RECV_F) return Action{Op::SEND_F, StageId{recv.stage.value - 1}, recv.microbatch};
  return Action{Op::SEND_B, StageId{recv.stage.value + 1}, recv.microbatch};
}

Action matching_recv(const Action& send) {
  if (send.op == Op::SEND_F) return Action{Op::RECV_F, StageId{send.stage.value + 1}, send.microbatch};
  return Action{Op::RECV_B, StageId{send.stage.value - 1}, send.microbatch};
}

// --- StashTracker -------------------------------------------------------------

StashTracker::StashTracker(const Program& program)
    : program_(program),
      stages_(program.num_stages()),
      version_of_(program.num_stages(), std::vector<int>(program.num_microbatches, -1)),
      held_(program.num_stages()) {}

void StashTracker::apply(const Action& a) {
  if (a.stage.value < 0 || a.stage.value >= program_.num_stages()) return;
  Stage& st = stages_[a.stage.value];
  const int m = a.microbatch ? a.microbatch->value : -1;
  const bool known_mb = m >= 0 && m < program_.num_microbatches;
  switch (a.op) {
    case Op::F:
      if (program_.recomputes(a.stage, MicrobatchId{m})) ++st.inputs; else ++st.full;
      if (known_mb) set_version(a.stage.value, m, st.version);
      break;
    case Op::R:
      --st.inputs;
      ++st.full;
      break;
    case Op::I: ++st.weight_only; break;  // what only the input gradient needed is freed
    case Op::B:
      --st.full;
      if (known_mb) set_version(a.stage.value, m, -1);
      break;
    case Op::W:
      --st.full;
      --st.weight_only;
      if (known_mb) set_version(a.stage.value, m, -1);
      break;
    case Op::STEP: ++st.version; break;
    default: break;
  }
  st.peak_full = std::max(st.peak_full, st.full);
  st.peak_inputs = std::max(st.peak_inputs, st.inputs);
  st.peak_total = std::max(st.peak_total, st.full + st.inputs);
  const std::array<int, 3> now = st.state();
  // a holds at least b, whatever the bytes of each kind.
  const auto covers = [](const std::array<int, 3>& a, const std::array<int, 3>& b) {
    return a[0] >= b[0] && a[1] >= b[1] && a[2] >= b[2];
  };
  if (std::none_of(st.frontier.begin(), st.frontier.end(), [&](const auto& p) { return covers(p, now); })) {
    std::erase_if(st.frontier, [&](const auto& p) { return covers(now, p); });
    st.frontier.push_back(now);
  }
  // Versions alive: the current one and those in-flight micro-batches hold.
  const auto& held = held_[a.stage.value];
  const int alive = static_cast<int>(held.size()) + (held.count(st.version) ? 0 : 1);
  st.peak_versions = std::max(st.peak_versions, alive);
}

void StashTracker::set_version(int stage, int microbatch, int version) {
  int& now = version_of_[stage][microbatch];
  auto& held = held_[stage];
  if (now >= 0) {
    const auto it = held.find(now);
    if (--it->second == 0) held.erase(it);
  }
  now = version;
  if (version >= 0) ++held[version];
}

// --- RankInterpreter ------------------------------------------------------------

RankInterpreter::RankInterpreter(const Program& program, RankId rank)
    : program_(program), rank_(rank), actions_(program.ranks.at(rank.value)) {}

RankInterpreter::Status RankInterpreter::step(Backend& backend) {
  if (done()) return Status::Done;
  const Action& a = actions_[position_];
  if (is_send(a.op)) {
    backend.send(rank_, a, peer_of(program_, a));
  } else if (is_recv(a.op)) {
    if (!backend.recv(rank_, a, peer_of(program_, a))) return Status::Blocked;
  } else {
    backend.compute(rank_, a);
  }
  ++position_;
  return Status::Progressed;
}

}  // namespace pipetwin::schedule
