// check_unshards (validate.hpp): FSDP's UNSHARD and RESHARD, as PyTorch's
// runtime checks them.
#include <map>
#include <string>

#include "schedule/grid.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::schedule {
namespace {

struct Loc {
  RankId rank;
  std::size_t step = 0;
};

[[noreturn]] void fail(const Program& p, Loc at, const std::string& what) {
  throw ScheduleError(at.rank, at.step, what, format_order_grid(p, {{at.rank, at.step}}));
}

}  // namespace

void check_unshards(const Program& p) {
  // A stage with FSDP actions on its rank: gathered now, since which
  // UNSHARD, and whether it has computed since.
  struct Stage {
    bool gathered = false, computed = false;
    std::size_t opened = 0;
  };
  for (int r = 0; r < p.num_ranks; ++r) {
    const auto& actions = p.ranks[r];
    std::map<int, Stage> stages;
    for (const auto& a : actions) {
      if (is_fsdp(a.op)) stages[a.stage.value];
    }
    if (stages.empty()) continue;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const auto it = stages.find(a.stage.value);
      if (it == stages.end()) continue;
      Stage& st = it->second;
      const Loc at{RankId{r}, i};
      const std::string s = std::to_string(a.stage.value);
      if (a.op == Op::UNSHARD && st.gathered) {
        fail(p, at, to_string(a) + ": stage " + s + " is gathered already (since its UNSHARD at step " +
                     std::to_string(st.opened) + "): expected " + s + "RESHARD before it");
      }
      if (a.op == Op::RESHARD && !st.gathered) {
        fail(p, at, to_string(a) + ": stage " + s + " is not gathered: expected " + s + "UNSHARD before it");
      }
      // PyTorch's runtime waits for an UNSHARD's gather at the stage's next compute only.
      if (a.op == Op::RESHARD && !st.computed) {
        fail(p, at, to_string(a) + ": stage " + s + " has not computed since its UNSHARD at step " +
                     std::to_string(st.opened) + " (a gather nothing waits for)");
      }
      if (is_compute(a.op) && !st.gathered) {
        fail(p, at, to_string(a) + " computes on stage " + s + " while its weights are sharded: expected " + s +
                     "UNSHARD before it (the stage's other actions are gathered by UNSHARD and freed by RESHARD)");
      }
      if (is_compute(a.op)) st.computed = true;
      if (a.op == Op::UNSHARD) st = {true, false, i};
      if (a.op == Op::RESHARD) st.gathered = false;
    }
    for (const auto& [stage, st] : stages) {
      if (st.gathered) {
        fail(p, Loc{RankId{r}, st.opened}, std::to_string(stage) + "UNSHARD has no RESHARD after it: the next step's UNSHARD "
                                          "of stage " + std::to_string(stage) + " would find it gathered");
      }
    }
  }
}

}  // namespace pipetwin::schedule
