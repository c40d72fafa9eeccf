// The greedy of the authors' zbv_greedy.py, function for function (see the
// header). A slot is one unit of time on a rank; every list below holds, per
// rank and per type, the slot of each micro-batch (its index in the list).
// Types, numbered as the authors number them ('FfBbWw'):
//
//   0  F of chunk 0 (stage r)           1  F of chunk 1 (stage 2K-1-r)
//   2  I of chunk 1 (stage 2K-1-r)      3  I of chunk 0 (stage r)
//   4  W (of either chunk; of chunk 1 once split)     5  W of chunk 0 (split)
//
// The paper's B is the input gradient, pipetwin's I; its W is W.
#include "schedule/generators/v_shape_greedy.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <stdexcept>
#include <tuple>

#include "schedule/error.hpp"

namespace pipetwin::schedule::v_shape {
namespace {

using Lists = std::vector<std::vector<int>>;  // one rank: type -> slot of each micro-batch
using Ranks = std::vector<Lists>;

// The block repeats every 6 slots: F, F, I, I and the two W of a micro-batch.
constexpr int kPeriod = 6;
constexpr std::int64_t kMaxGreedyWork = 100'000'000;

void check(bool ok, const char* what) {
  if (!ok) throw std::logic_error(std::string("v-shape greedy: ") + what);
}

// The latest slot of a rank: the largest of its lists' last slots (each list
// is in increasing order).
int last_slot(const Lists& s) {
  int bound = -1;
  for (const auto& l : s) {
    check(!l.empty(), "an empty list");
    bound = std::max(bound, l.back());
  }
  return bound;
}

// The earliest not yet walked entry over the first `types` lists, as
// (slot, type); `inf` where every list is walked.
std::pair<int, int> next_entry(const Lists& s, const std::vector<std::size_t>& p, std::size_t types, int inf) {
  std::pair<int, int> best{inf, 0};
  for (std::size_t t = 0; t < types; ++t) {
    const std::pair<int, int> e{p[t] < s[t].size() ? s[t][p[t]] : inf, static_cast<int>(t)};
    best = std::min(best, e);
  }
  return best;
}

// put_w: every I owes a W; walking the slots, a free slot takes the oldest W
// owed (of chunk 1 first once split), and those still owed at the end follow
// the last slot. Appends the W list (split: chunk 1's, then chunk 0's).
void put_w(Lists& s, bool split) {
  check(s.size() == 4, "put_w takes the four lists F, f, B, b");
  const int bound = last_slot(s), inf = bound + 1;
  s.emplace_back();
  if (split) s.emplace_back();
  int owed[2] = {0, 0};
  std::vector<std::size_t> p(s.size(), 0);
  for (int i = 0; i <= bound; ++i) {
    const auto [slot, type] = next_entry(s, p, 4, inf);
    check(slot != inf, "put_w ran out of entries");
    if (slot == i) {
      ++p[type];
      if (type == 2 || type == 3) ++owed[split ? type - 2 : 0];
    } else {
      for (int w = 0; w < 2; ++w) {
        if (owed[w] > 0) {
          s[4 + w].push_back(i);
          --owed[w];
          break;
        }
      }
    }
  }
  int i = bound;
  for (int w = 0; w < 2; ++w) {
    while (owed[w] > 0) {
      s[4 + w].push_back(++i);
      --owed[w];
    }
  }
}

// mem_of_stage: the rank's peak of stashed chunk micro-batches, a forward
// adding one and a W freeing one; without W lists, each free slot runs one
// owed W.
int mem_of_stage(const Lists& s) {
  static constexpr int kMemory[] = {1, 1, 0, 0, -1};
  const bool has_w = s.size() > 4;
  check(s.size() <= 5, "mem_of_stage takes at most five lists");
  const int bound = last_slot(s), inf = bound + 1;
  int owed = 0, cur = 0, peak = 0;
  std::vector<std::size_t> p(s.size(), 0);
  for (int i = 0; i <= bound; ++i) {
    const auto [slot, type] = next_entry(s, p, s.size(), inf);
    check(slot != inf, "mem_of_stage ran out of entries");
    if (slot == i) {
      ++p[type];
      cur += kMemory[type];
      if (type == 2 || type == 3) ++owed;
    } else if (!has_w && owed > 0) {
      cur += kMemory[4];
      --owed;
    }
    peak = std::max(peak, cur);
  }
  return peak;
}

// The authors' walk order over every rank's entries: by slot, then rank, type
// and micro-batch. Entries are taken in order from each list, and a list's
// entries not yet taken keep their slots, so a heap of each list's next entry
// gives the order of their repeated minimum.
class Walk {
 public:
  explicit Walk(const Ranks& sr) : sr_(sr) {
    for (std::size_t r = 0; r < sr.size(); ++r) {
      for (std::size_t t = 0; t < sr[r].size(); ++t) {
        if (!sr[r][t].empty()) heap_.emplace(sr[r][t][0], static_cast<int>(r), static_cast<int>(t), 0);
      }
    }
  }
  bool done() const { return heap_.empty(); }
  // (slot, rank, type, micro-batch) of the next entry; the one after it in
  // its list joins the heap at its slot of now.
  std::tuple<int, int, int, int> pop() {
    const auto e = heap_.top();
    heap_.pop();
    const auto [slot, r, t, mb] = e;
    const auto& l = sr_[r][t];
    if (static_cast<std::size_t>(mb) + 1 < l.size()) heap_.emplace(l[mb + 1], r, t, mb + 1);
    return e;
  }

 private:
  const Ranks& sr_;
  using Entry = std::tuple<int, int, int, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
};

// eager_execution_time with every cost 1 and free transfers: the start slot of
// every entry, each as early as its dependencies (the authors' ones, below)
// and the entry before it on its rank allow.
Ranks eager_start(const Ranks& sr) {
  const int K = static_cast<int>(sr.size());
  Ranks end = sr;
  for (auto& s : end) {
    for (auto& l : s) std::fill(l.begin(), l.end(), -1);
  }
  std::vector<int> previous(K, 0);
  Walk walk(sr);
  const auto after = [](int end_slot) {
    check(end_slot >= 0, "an entry walked before its dependency");
    return end_slot;
  };
  while (!walk.done()) {
    const auto [slot, r, type, mb] = walk.pop();
    int deps = 0;
    // F of chunk 0 and I of chunk 1 flow to the next rank, F of chunk 1 and I
    // of chunk 0 to the previous; each type waits for the one before it on
    // the rank (f for F at the turn of the V, B for f at the loss, b for B).
    if ((type == 0 || type == 2) && r > 0) deps = std::max(deps, after(end[r - 1][type][mb]));
    if ((type == 1 || type == 3) && r + 1 < K) deps = std::max(deps, after(end[r + 1][type][mb]));
    if (type > 0 && type < 4) deps = std::max(deps, after(end[r][type - 1][mb]));
    if (mb > 0) deps = std::max(deps, after(end[r][type][mb - 1]));
    deps = std::max(deps, previous[r]);
    end[r][type][mb] = previous[r] = deps + 1;
  }
  for (auto& s : end) {
    for (auto& l : s) {
      for (auto& e : l) e -= 1;
    }
  }
  return end;
}

// reorder: walking the entries in slot order, move each to the earliest free
// slot after its dependencies where the rank's peak memory stays within the
// block's. The steady state (from the first I of chunk 0 on rank 0 to the
// first forward of the last micro-batch) stays as the block has it, and so
// does the warm-up when W is left to fill free slots.
Ranks reorder(Ranks sr, bool consider_w) {
  if (consider_w) {
    for (auto& s : sr) put_w(s, false);
  }
  const int K = static_cast<int>(sr.size());
  const int M = static_cast<int>(sr[0][0].size());
  int current = 0;
  for (const auto& s : sr) current = std::max(current, mem_of_stage(s));
  std::vector<std::vector<char>> occupied;
  for (const auto& s : sr) occupied.emplace_back(last_slot(s) + 1, 0);
  int phase = 0;
  Walk walk(sr);
  while (!walk.done()) {
    const auto [slot, r, type, mb] = walk.pop();
    int& at = sr[r][type][mb];
    if (type == 3 && r == 0 && phase == 0) phase = 1;
    if (phase == 1) {
      if (type == 0 && mb == M - 1) phase = 2;
      occupied[r][at] = 1;
      continue;
    }
    if (phase == 0 && !consider_w) {
      occupied[r][at] = 1;
      continue;
    }
    int deps = -1;
    if ((type == 0 || type == 2) && r > 0) deps = std::max(deps, sr[r - 1][type][mb]);
    if ((type == 1 || type == 3) && r + 1 < K) deps = std::max(deps, sr[r + 1][type][mb]);
    if (type > 0 && type < 4) deps = std::max(deps, sr[r][type - 1][mb]);
    if (type == 4) {  // the mb-th W follows the mb-th I of the rank, of either chunk
      std::vector<int> inputs(sr[r][2]);
      inputs.insert(inputs.end(), sr[r][3].begin(), sr[r][3].end());
      std::sort(inputs.begin(), inputs.end());
      deps = std::max(deps, inputs.at(mb));
    }
    if (mb > 0) deps = std::max(deps, sr[r][type][mb - 1]);
    ++deps;
    check(deps <= slot, "an entry's dependency after it");
    bool ok = false;
    for (int candidate = deps; candidate < slot; ++candidate) {
      if (occupied[r][candidate]) continue;
      at = candidate;
      if (mem_of_stage(sr[r]) <= current) {
        ok = true;
        break;
      }
    }
    if (!ok) at = slot;
    occupied[r][at] = 1;
  }
  if (!consider_w) {
    for (auto& s : sr) put_w(s, false);
  }
  return eager_start(sr);
}

}  // namespace

Program schedule_from_blocks(const std::string& name, const std::vector<Block>& blocks, const GeneratorOptions& o) {
  const int K = static_cast<int>(blocks.size()), M = o.microbatches;
  // The greedy weighs each move by walking the rank's whole span of slots
  // (mem_of_stage): about K x M x (6M + 4K) steps, which it is refused past
  // (K = 64, M = 128 is 8.4e6 of them, a fraction of a second).
  const std::int64_t work = static_cast<std::int64_t>(K) * M * (6LL * M + 4LL * K);
  if (work > kMaxGreedyWork) {
    throw Error("schedule " + name + ": K=" + std::to_string(K) + " x M=" + std::to_string(M) + " x (6M+4K) = " +
                std::to_string(work) + " is more than the " + std::to_string(kMaxGreedyWork) +
                " steps its greedy may take; use fewer ranks or micro-batches");
  }
  // schedule_from_pattern: micro-batch j of every type at its block slot + 6j.
  Ranks sr(K);
  for (int r = 0; r < K; ++r) {
    for (const int first : blocks[r]) {
      std::vector<int> slots(M);
      for (int j = 0; j < M; ++j) slots[j] = first + kPeriod * j;
      sr[r].push_back(std::move(slots));
    }
  }
  // Squeeze with W placed, then again with W left to fill free slots, then
  // place W for good, chunk by chunk.
  Ranks r1 = reorder(std::move(sr), true);
  for (auto& s : r1) s.resize(4);
  Ranks r2 = reorder(std::move(r1), false);
  for (auto& s : r2) {
    s.resize(4);
    put_w(s, true);
  }
  // create_schedule: each rank's entries in slot order.
  Program p = make_program(name, K, 2, M, o.recompute);
  for (int s = K; s < 2 * K; ++s) p.stage_to_rank[s] = RankId{2 * K - 1 - s};
  static constexpr Op kOps[] = {Op::F, Op::F, Op::I, Op::I, Op::W, Op::W};
  static constexpr bool kChunk1[] = {false, true, true, false, true, false};
  for (int r = 0; r < K; ++r) {
    std::vector<std::tuple<int, int, int>> entries;  // (slot, type, micro-batch)
    for (int t = 0; t < 6; ++t) {
      for (int mb = 0; mb < static_cast<int>(r2[r][t].size()); ++mb) entries.emplace_back(r2[r][t][mb], t, mb);
    }
    std::sort(entries.begin(), entries.end());
    for (std::size_t i = 1; i < entries.size(); ++i) {
      check(std::get<0>(entries[i - 1]) != std::get<0>(entries[i]), "two entries of a rank in one slot");
    }
    for (const auto& [slot, t, mb] : entries) {
      p.ranks[r].push_back(make_action(kOps[t], kChunk1[t] ? 2 * K - 1 - r : r, mb));
    }
  }
  return p;
}

}  // namespace pipetwin::schedule::v_shape
