// The lowering passes of passes.hpp.
#include "schedule/passes.hpp"

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <tuple>
#include <vector>

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
  // Before the backward, or before the OVERLAP_F_B that holds it.
  for (auto& actions : p.ranks) {
    std::vector<Action> out;
    out.reserve(actions.size() * 2);
    for (std::size_t b = 0; b < actions.size();) {
      const std::size_t e = group_end(actions, b);
      for (std::size_t i = b; i < e; ++i) {
        const Action& a = actions[i];
        if ((a.op == Op::B || a.op == Op::I) && p.recomputes(a.stage, *a.microbatch)) {
          out.push_back(Action{Op::R, a.stage, a.microbatch});
        }
      }
      out.insert(out.end(), actions.begin() + static_cast<std::ptrdiff_t>(b), actions.begin() + static_cast<std::ptrdiff_t>(e));
      b = e;
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
    // An OVERLAP_F_B's receives all before it and its sends all after it, as PyTorch lowers one.
    for (std::size_t b = 0; b < actions.size();) {
      const std::size_t e = group_end(actions, b);
      for (std::size_t i = b; i < e; ++i) {
        const Action& a = actions[i];
        const int s = a.stage.value;
        if (a.op == Op::F && crosses(p, s, s - 1)) out.push_back(Action{Op::RECV_F, a.stage, a.microbatch});
        if ((a.op == Op::B || a.op == Op::I) && crosses(p, s, s + 1)) out.push_back(Action{Op::RECV_B, a.stage, a.microbatch});
      }
      out.insert(out.end(), actions.begin() + static_cast<std::ptrdiff_t>(b), actions.begin() + static_cast<std::ptrdiff_t>(e));
      for (std::size_t i = b; i < e; ++i) {
        const Action& a = actions[i];
        const int s = a.stage.value;
        if (a.op == Op::F && crosses(p, s, s + 1)) out.push_back(Action{Op::SEND_F, a.stage, a.microbatch});
        if ((a.op == Op::B || a.op == Op::I) && crosses(p, s, s - 1)) out.push_back(Action{Op::SEND_B, a.stage, a.microbatch});
      }
      b = e;
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

Program insert_gradient_reductions(Program p) {
  if (p.data_parallel <= 1) return p;
  // A stage that already has its reductions (a PyTorch CSV's) keeps them.
  std::set<int> reduced;
  for (const auto& actions : p.ranks) {
    for (const auto& a : actions) {
      if (a.op == Op::REDUCE_GRAD) reduced.insert(a.stage.value);
    }
  }
  for (auto& actions : p.ranks) {
    std::vector<Action> out;
    out.reserve(actions.size() + 2 * static_cast<std::size_t>(p.stages_per_rank));
    // Where each stage's latest backward since its last STEP stands in `out`.
    std::map<int, std::size_t> last_backward;
    // (position in out, the reduction): a STEP per micro-batch (PipeDream's) gets a reduction per micro-batch.
    std::vector<std::pair<std::size_t, Action>> inserts;
    for (const auto& a : actions) {
      if (a.op == Op::STEP) {
        const auto it = last_backward.find(a.stage.value);
        if (it != last_backward.end() && !reduced.count(a.stage.value)) {
          Action r = make_stage_action(Op::REDUCE_GRAD, a.stage.value);
          r.microbatch = a.microbatch;
          inserts.push_back({it->second + 1, r});
        }
        last_backward.erase(a.stage.value);
      }
      out.push_back(a);
      if (a.op == Op::B || a.op == Op::W) last_backward[a.stage.value] = out.size() - 1;
    }
    // Never inside an OVERLAP_F_B: after the whole of it.
    for (auto& [at, reduction] : inserts) {
      while (at < out.size() && out[at].overlapped) ++at;
    }
    std::stable_sort(inserts.begin(), inserts.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<Action> merged;
    merged.reserve(out.size() + inserts.size());
    std::size_t next = 0;
    for (std::size_t i = 0; i <= out.size(); ++i) {
      for (; next < inserts.size() && inserts[next].first == i; ++next) {
        merged.push_back(inserts[next].second);
      }
      if (i < out.size()) merged.push_back(out[i]);
    }
    actions = std::move(merged);
  }
  return p;
}

Program receive_at_use(Program p, int* moved) {
  int count = 0;
  for (auto& actions : p.ranks) {
    // Where each (kind, stage, micro-batch) is consumed: kind 0 forwards, 1 backwards (B, I).
    std::map<std::tuple<int, int, int>, std::vector<std::size_t>> consumers;
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const auto& a = actions[i];
      if (!a.microbatch) continue;
      const int kind = a.op == Op::F ? 0 : (a.op == Op::B || a.op == Op::I) ? 1 : -1;
      if (kind >= 0) consumers[{kind, a.stage.value, a.microbatch->value}].push_back(i);
    }
    std::vector<std::vector<Action>> before(actions.size());
    std::vector<bool> leaves(actions.size(), false);
    for (std::size_t i = 0; i < actions.size(); ++i) {
      const auto& a = actions[i];
      if (!is_recv(a.op) || !a.microbatch) continue;
      const auto it = consumers.find({a.op == Op::RECV_F ? 0 : 1, a.stage.value, a.microbatch->value});
      if (it == consumers.end()) continue;
      const auto next = std::upper_bound(it->second.begin(), it->second.end(), i);
      if (next == it->second.end()) continue;
      const std::size_t at = group_begin(actions, *next);  // an OVERLAP_F_B waits for all its data first
      before[at].push_back(a);
      leaves[i] = true;
      for (std::size_t k = i + 1; k < at; ++k) {
        if (!is_recv(actions[k].op)) {
          ++count;
          break;
        }
      }
    }
    std::vector<Action> out;
    out.reserve(actions.size());
    for (std::size_t i = 0; i < actions.size(); ++i) {
      for (const auto& r : before[i]) out.push_back(r);
      if (!leaves[i]) out.push_back(actions[i]);
    }
    actions = std::move(out);
  }
  if (moved != nullptr) *moved = count;
  return p;
}

}  // namespace pipetwin::schedule
