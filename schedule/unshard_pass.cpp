// insert_unshards (passes.hpp): PyTorch's _add_unshard_reshard on pipetwin's
// complete programs.
#include <algorithm>
#include <limits>
#include <vector>

#include "schedule/error.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::schedule {
namespace {

// A rank's compute groups: [begin, end) in its list, an OVERLAP_F_B whole.
struct Group {
  std::size_t begin = 0, end = 0;
  std::vector<int> stages;  // its actions' stages, in order, each once
};

std::vector<Group> compute_groups(const std::vector<Action>& actions) {
  std::vector<Group> out;
  for (std::size_t i = 0; i < actions.size();) {
    const std::size_t end = group_end(actions, i);
    if (is_compute(actions[i].op)) {
      Group g{i, end, {}};
      for (std::size_t k = i; k < end; ++k) {
        if (std::find(g.stages.begin(), g.stages.end(), actions[k].stage.value) == g.stages.end()) {
          g.stages.push_back(actions[k].stage.value);
        }
      }
      out.push_back(std::move(g));
    }
    i = end;
  }
  return out;
}

// PyTorch's next_stage_indices from group `at`: the first `count` distinct
// stages to compute, in order (an OVERLAP_F_B adds all of its own before
// the count is checked). `next` holds, by stage, the first group at or
// after `at` that computes it (the maximum: none): found by its order
// rather than by a scan to the list's end, which for one stage per rank
// would be quadratic in the list.
std::vector<int> next_stages(const std::vector<Group>& groups, const std::vector<std::size_t>& next, std::size_t count) {
  std::vector<std::pair<std::size_t, int>> coming;  // (group, stage)
  for (std::size_t s = 0; s < next.size(); ++s) {
    if (next[s] != std::numeric_limits<std::size_t>::max()) coming.emplace_back(next[s], static_cast<int>(s));
  }
  std::sort(coming.begin(), coming.end());
  std::vector<int> out;
  for (std::size_t k = 0; k < coming.size();) {
    const Group& g = groups[coming[k].first];
    for (const int s : g.stages) {
      if (next[static_cast<std::size_t>(s)] == coming[k].first) out.push_back(s);
    }
    const std::size_t first = coming[k].first;
    while (k < coming.size() && coming[k].first == first) ++k;
    if (out.size() >= count) break;
  }
  return out;
}

std::vector<Action> with_unshards(const std::vector<Action>& actions, std::size_t count) {
  auto groups = compute_groups(actions);
  // The rank's stages, numbered here in order of their stage numbers.
  std::vector<int> mine;
  for (const auto& g : groups) mine.insert(mine.end(), g.stages.begin(), g.stages.end());
  std::sort(mine.begin(), mine.end());
  mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
  const auto local = [&mine](int s) { return static_cast<int>(std::lower_bound(mine.begin(), mine.end(), s) - mine.begin()); };
  for (auto& g : groups) {
    for (int& s : g.stages) s = local(s);
  }
  // By group, from the last: where each of the rank's stages computes next.
  std::vector<std::vector<std::size_t>> next_of(groups.size());
  std::vector<std::size_t> next(mine.size(), std::numeric_limits<std::size_t>::max());
  for (std::size_t g = groups.size(); g-- > 0;) {
    for (const int s : groups[g].stages) next[static_cast<std::size_t>(s)] = g;
    next_of[g] = next;
  }
  std::vector<Action> out;
  out.reserve(actions.size() + 4 * groups.size() / std::max<std::size_t>(1, count) + 8);
  std::vector<int> active;  // gathered, in the order gathered
  std::size_t copied = 0;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    // The receives right before the group wait for their data there: FSDP's actions go before them.
    std::size_t at = groups[g].begin;
    while (at > copied && is_recv(actions[at - 1].op)) --at;
    out.insert(out.end(), actions.begin() + static_cast<std::ptrdiff_t>(copied), actions.begin() + static_cast<std::ptrdiff_t>(at));
    copied = at;
    const auto coming = next_stages(groups, next_of[g], count);
    std::vector<int> evict;
    for (const int s : active) {
      if (std::find(coming.begin(), coming.end(), s) == coming.end()) evict.push_back(s);
    }
    std::sort(evict.begin(), evict.end());  // PyTorch's set of a few small stage numbers iterates in order
    for (const int s : evict) {
      out.push_back(make_stage_action(Op::RESHARD, mine[static_cast<std::size_t>(s)]));
      active.erase(std::find(active.begin(), active.end(), s));
    }
    for (const int s : coming) {
      if (std::find(active.begin(), active.end(), s) != active.end()) continue;
      out.push_back(make_stage_action(Op::UNSHARD, mine[static_cast<std::size_t>(s)]));
      active.push_back(s);
    }
  }
  out.insert(out.end(), actions.begin() + static_cast<std::ptrdiff_t>(copied), actions.end());
  std::sort(active.begin(), active.end());
  for (const int s : active) out.push_back(make_stage_action(Op::RESHARD, mine[static_cast<std::size_t>(s)]));
  return out;
}

}  // namespace

bool holds_fsdp_actions(const Program& p) {
  return std::any_of(p.ranks.begin(), p.ranks.end(), [](const std::vector<Action>& actions) {
    return std::any_of(actions.begin(), actions.end(), [](const Action& a) { return is_fsdp(a.op); });
  });
}

Program insert_unshards(Program p, int max_active_stages) {
  if (max_active_stages < 1) {
    throw Error("at most " + std::to_string(max_active_stages) + " stages gathered at a time: FSDP's UNSHARD needs at least 1");
  }
  if (holds_fsdp_actions(p)) return p;
  for (auto& actions : p.ranks) actions = with_unshards(actions, static_cast<std::size_t>(max_active_stages));
  return p;
}

}  // namespace pipetwin::schedule
