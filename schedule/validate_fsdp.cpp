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
  for (int r = 0; r < p.num_ranks; ++r) {
    const auto& actions = p.ranks[r];
    std::map<int, bool> gathered;  // stages with FSDP actions: gathered now?
    for (const auto& a : actions) {
      if (is_fsdp(a.op)) gathered[a.stage.value] = false;
    }
    if (gathered.empty()) continue;
    std::map<int, std::size_t> opened;  // a gathered stage's UNSHARD
    std::map<int, bool> computed;       // and whether it has computed since
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      const auto it = gathered.find(a.stage.value);
      if (it == gathered.end()) continue;
      const Loc at{RankId{r}, i};
      const std::string s = std::to_string(a.stage.value);
      if (a.op == Op::UNSHARD && it->second) {
        fail(p, at, to_string(a) + ": stage " + s + " is gathered already (since its UNSHARD at step " +
                     std::to_string(opened[a.stage.value]) + "): expected " + s + "RESHARD before it");
      }
      if (a.op == Op::RESHARD && !it->second) {
        fail(p, at, to_string(a) + ": stage " + s + " is not gathered: expected " + s + "UNSHARD before it");
      }
      // PyTorch's runtime waits for an UNSHARD's gather at the stage's next compute only.
      if (a.op == Op::RESHARD && !computed[a.stage.value]) {
        fail(p, at, to_string(a) + ": stage " + s + " has not computed since its UNSHARD at step " +
                     std::to_string(opened[a.stage.value]) + " (a gather nothing waits for)");
      }
      if (is_compute(a.op)) computed[a.stage.value] = true;
      if (a.op == Op::UNSHARD) computed[a.stage.value] = false;
      if (is_compute(a.op) && !it->second) {
        fail(p, at, to_string(a) + " computes on stage " + s + " while its weights are sharded: expected " + s +
                     "UNSHARD before it (the stage's other actions are gathered by UNSHARD and freed by RESHARD)");
      }
      if (a.op == Op::UNSHARD) opened[a.stage.value] = i;
      if (is_fsdp(a.op)) it->second = a.op == Op::UNSHARD;
    }
    for (const auto& [stage, now] : gathered) {
      if (now) {
        fail(p, Loc{RankId{r}, opened[stage]}, std::to_string(stage) + "UNSHARD has no RESHARD after it: the next step's UNSHARD "
                                             "of stage " + std::to_string(stage) + " would find it gathered");
      }
    }
  }
}

}  // namespace pipetwin::schedule
