// The lowering passes of passes.hpp.
#include "schedule/passes.hpp"

#include <algorithm>

namespace pipetwin::schedule {
namespace {

bool holds(const Program& p, Op op) {
  for (const auto& actions : p.ranks) {
    if (std::any_of(actions.begin(), actions.end(), [op](const Action& a) { return a.op == op; })) {
      return true;
    }
  }
  return false;
}

bool crosses(const Program& p, int from_stage, int to_stage) {
  return to_stage >= 0 && to_stage < p.num_stages() &&
         p.stage_to_rank[from_stage] != p.stage_to_rank[to_stage];
}

}  // namespace

Program insert_recomputes(Program p) {
  if (p.recompute == RecomputePolicy::None || holds(p, Op::R)) return p;
  for (auto& actions : p.ranks) {
    std::vector<Action> out;
    out.reserve(actions.size() * 2);
    for (const auto& a : actions) {
      if ((a.op == Op::B || a.op == Op::I) && p.recomputes(a.stage, *a.microbatch)) {
        out.push_back(Action{Op::R, a.stage, a.microbatch});
      }
      out.push_back(a);
    }
    actions = std::move(out);
  }
  return p;
}

Program insert_transfers(Program p) {
  if (p.has_transfers()) return p;
  for (auto& actions : p.ranks) {
    std::vector<Action> out;
    out.reserve(actions.size() * 3);
    for (const auto& a : actions) {
      const int s = a.stage.value;
      const bool forward = a.op == Op::F;
      const bool backward = a.op == Op::B || a.op == Op::I;
      if (forward && crosses(p, s, s - 1)) out.push_back(Action{Op::RECV_F, a.stage, a.microbatch});
      if (backward && crosses(p, s, s + 1)) out.push_back(Action{Op::RECV_B, a.stage, a.microbatch});
      out.push_back(a);
      if (forward && crosses(p, s, s + 1)) out.push_back(Action{Op::SEND_F, a.stage, a.microbatch});
      if (backward && crosses(p, s, s - 1)) out.push_back(Action{Op::SEND_B, a.stage, a.microbatch});
    }
    actions = std::move(out);
  }
  return p;
}

Program insert_optimizer_step(Program p) {
  if (holds(p, Op::STEP)) return p;
  for (int r = 0; r < p.num_ranks; ++r) {
    for (const StageId stage : p.stages_of(RankId{r})) {
      p.ranks[r].push_back(make_stage_action(Op::STEP, stage.value));
    }
  }
  return p;
}

Program lower(Program p) {
  return insert_optimizer_step(insert_transfers(insert_recomputes(std::move(p))));
}

}  // namespace pipetwin::schedule
