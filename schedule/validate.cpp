// The checks of validate.hpp, in the order they run. Each failure points at the
// action that is wrong (or, for a missing action, at the action that needs it).
#include "schedule/validate.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "schedule/grid.hpp"
#include "schedule/interpreter.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::schedule {

ScheduleError::ScheduleError(RankId r, std::size_t s, std::string w, const std::string& grid)
    : Error("invalid schedule: rank " + std::to_string(r.value) + ", step " + std::to_string(s) + ": " +
            w + "\n\n" + grid),
      rank(r),
      step(s),
      reason(std::move(w)) {}

namespace {

struct Loc {
  RankId rank;
  std::size_t step = 0;
};

using Key = std::tuple<Op, int, int>;  // op, stage, micro-batch (-1 for stage-level ops)

Key key_of(const Action& a) { return {a.op, a.stage.value, a.microbatch ? a.microbatch->value : -1}; }
Key key(Op op, int stage, int mb) { return {op, stage, mb}; }
std::string name(const Key& k) {
  const auto [op, s, m] = k;
  return m < 0 ? to_string(make_stage_action(op, s)) : to_string(make_action(op, s, m));
}

// The actions of a Program by key. Dense (a step per op, stage and
// micro-batch, the rank being the stage's) where that table is at most a few
// times the Program's actions: every complete Program, whose checks look up
// tens of millions of keys at K = 1024 (a tree's lookups were half of
// simulate's time there); a tree otherwise (a file that declares far more
// stages or micro-batches than it holds actions).
class ActionIndex {
 public:
  explicit ActionIndex(const Program& p)
      : p_(p), stages_(static_cast<std::size_t>(p.num_stages())), columns_(static_cast<std::size_t>(p.num_microbatches) + 1) {}
  // Before the first insert: the table, where it is dense.
  void reserve() {
    const std::size_t slots = kOps * stages_ * columns_;
    if (slots <= 4 * p_.num_actions() + (std::size_t{1} << 20)) dense_.assign(slots, kEmpty);
  }
  // The action already at `k`, if any; else records `at` for it.
  std::optional<Loc> insert(const Key& k, Loc at) {
    if (dense_.empty()) {
      const auto [it, fresh] = tree_.emplace(k, at);
      return fresh ? std::nullopt : std::optional<Loc>(it->second);
    }
    auto& step = dense_[slot(k)];
    if (step != kEmpty) return loc(k, step);
    step = static_cast<std::uint32_t>(at.step);
    return std::nullopt;
  }
  std::optional<Loc> find(const Key& k) const {
    if (dense_.empty()) {
      const auto it = tree_.find(k);
      return it == tree_.end() ? std::nullopt : std::optional<Loc>(it->second);
    }
    const auto [op, s, m] = k;
    if (s < 0 || static_cast<std::size_t>(s) >= stages_ || m < -1 || static_cast<std::size_t>(m + 1) >= columns_) return std::nullopt;
    const std::uint32_t step = dense_[slot(k)];
    return step == kEmpty ? std::nullopt : std::optional<Loc>(loc(k, step));
  }

 private:
  static constexpr std::size_t kOps = static_cast<std::size_t>(Op::RESHARD) + 1;
  static constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();
  std::size_t slot(const Key& k) const {
    const auto [op, s, m] = k;
    return (static_cast<std::size_t>(op) * stages_ + static_cast<std::size_t>(s)) * columns_ + static_cast<std::size_t>(m + 1);
  }
  Loc loc(const Key& k, std::uint32_t step) const { return {p_.rank_of(StageId{std::get<1>(k)}), step}; }
  const Program& p_;
  std::size_t stages_, columns_;
  std::vector<std::uint32_t> dense_;
  std::map<Key, Loc> tree_;
};

class Checker {
 public:
  explicit Checker(const Program& p) : p_(p), index_(p) {}

  [[noreturn]] void fail(Loc at, const std::string& what) const {
    throw ScheduleError(at.rank, at.step, what, format_order_grid(p_, {{at.rank, at.step}}));
  }
  Loc end_of(int stage) const {
    const RankId r = p_.rank_of(StageId{stage});
    return {r, p_.ranks[r.value].size()};
  }
  std::optional<Loc> find(const Key& k) const { return index_.find(k); }
  std::string where(Loc l) const {
    return "rank " + std::to_string(l.rank.value) + " step " + std::to_string(l.step);
  }

  // Every action names a stage and (unless stage-level) a micro-batch that exist.
  // Runs before lowering too: the passes index the stage map with these values.
  void check_ranges() const {
    const int S = p_.num_stages(), M = p_.num_microbatches;
    for (int r = 0; r < p_.num_ranks; ++r) {
      for (std::size_t i = 0; i < p_.ranks[r].size(); ++i) {
        const Action& a = p_.ranks[r][i];
        const Loc at{RankId{r}, i};
        if (a.stage.value < 0 || a.stage.value >= S) {
          fail(at, to_string(a) + ": stage " + std::to_string(a.stage.value) + " does not exist (stages 0.." +
                       std::to_string(S - 1) + ")");
        }
        if (!a.microbatch && !is_stage_level(a.op)) fail(at, to_string(a) + ": needs a micro-batch");
        if (a.microbatch && (a.microbatch->value < 0 || a.microbatch->value >= M)) {
          fail(at, to_string(a) + ": micro-batch " + std::to_string(a.microbatch->value) +
                       " does not exist (micro-batches 0.." + std::to_string(M - 1) + ")");
        }
        if (a.overlapped) check_overlap(at);
      }
    }
  }

  // An overlapped action and the one before it on its rank are F, B, I or W:
  // one OVERLAP_F_B, the actions side by side.
  void check_overlap(Loc at) const {
    const auto& actions = p_.ranks[at.rank.value];
    const auto fb = [](Op op) { return op == Op::F || op == Op::B || op == Op::I || op == Op::W; };
    const Action& a = actions[at.step];
    if (!fb(a.op)) fail(at, to_string(a) + " is marked overlapped: only F, B, I and W run in an OVERLAP_F_B");
    if (at.step == 0 || !fb(actions[at.step - 1].op)) {
      fail(at, to_string(a) + " is marked overlapped but " +
                   (at.step == 0 ? std::string("is its rank's first action")
                                 : "follows " + to_string(actions[at.step - 1]) + ", not an F, B, I or W") +
                   ": an OVERLAP_F_B's actions stand side by side");
    }
  }

  void index_actions() {
    check_ranges();
    index_.reserve();
    for (int r = 0; r < p_.num_ranks; ++r) {
      for (std::size_t i = 0; i < p_.ranks[r].size(); ++i) {
        const Action& a = p_.ranks[r][i];
        const Loc at{RankId{r}, i};
        const RankId owner = p_.rank_of(a.stage);
        if (owner.value != r) {
          fail(at, to_string(a) + ": stage " + std::to_string(a.stage.value) + " lives on rank " +
                       std::to_string(owner.value) + ", not on rank " + std::to_string(r) +
                       " (a stage cannot be on two ranks)");
        }
        if (is_fsdp(a.op)) continue;  // a stage may be gathered and freed more than once a step
        if (const auto there = index_.insert(key_of(a), at)) {
          fail(at, to_string(a) + ": duplicate; the same action is already at " + where(*there));
        }
      }
    }
  }

  // A stage whose forwards and backwards name different micro-batches (each
  // holding one the other lacks) is the culprit, before any missing action is reported elsewhere: an imported list
  // numbered one apart (PyTorch 2.13's Schedule1F1B order numbers its last
  // rank's forwards 1..M) makes M one too large, and every other stage then
  // looks incomplete.
  void check_stage_microbatches() const {
    for (int s = 0; s < p_.num_stages(); ++s) {
      std::vector<int> forwards, backwards;
      std::optional<Loc> first_unmatched;
      bool backward_without_forward = false;
      for (int m = 0; m < p_.num_microbatches; ++m) {
        const bool back = find(key(Op::B, s, m)) || find(key(Op::I, s, m));
        const auto f = find(key(Op::F, s, m));
        if (back) backwards.push_back(m);
        backward_without_forward = backward_without_forward || (back && !f);
        if (f) {
          forwards.push_back(m);
          if (!back && (!first_unmatched || f->step < first_unmatched->step)) first_unmatched = f;
        }
      }
      // Only a mismatch both ways: a forward alone, or a backward alone, is a missing action.
      if (!first_unmatched || !backward_without_forward) continue;
      const auto& a = p_.ranks[first_unmatched->rank.value][first_unmatched->step];
      fail(*first_unmatched, to_string(a) + ": stage " + std::to_string(s) + " runs forwards of micro-batches " +
                                 ranges(forwards) + " but backwards of " + ranges(backwards) +
                                 (forwards.size() == backwards.size() ? " (numbered apart?)" : ""));
    }
  }

  // "0..7", "0..3, 5, 7..8"
  static std::string ranges(const std::vector<int>& v) {
    std::string out;
    for (std::size_t i = 0; i < v.size();) {
      std::size_t j = i;
      while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
      out += (out.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? ".." + std::to_string(v[j]) : "");
      i = j + 1;
    }
    return out;
  }

  // Every (stage, micro-batch): one F; one B, or one I and one W; R as the policy says.
  void check_completeness() const {
    for (int s = 0; s < p_.num_stages(); ++s) {
      for (int m = 0; m < p_.num_microbatches; ++m) {
        const auto f = find(key(Op::F, s, m)), b = find(key(Op::B, s, m));
        const auto i = find(key(Op::I, s, m)), w = find(key(Op::W, s, m)), r = find(key(Op::R, s, m));
        const std::string F = name(key(Op::F, s, m));
        if (!f) {
          const auto needer = b ? b : i ? i : w ? w : r;
          fail(needer ? *needer : end_of(s), "missing forward " + F);
        }
        if (b && (i || w)) fail(i ? *i : *w, name(key(i ? Op::I : Op::W, s, m)) + ": stage " +
                                                  std::to_string(s) + " micro-batch " + std::to_string(m) +
                                                  " already has a full backward " + name(key(Op::B, s, m)));
        if (!b && !i && !w) {
          fail(*f, F + " has no backward: expected " + name(key(Op::B, s, m)) + ", or " +
                       name(key(Op::I, s, m)) + " and " + name(key(Op::W, s, m)));
        }
        if (i && !w) fail(*i, name(key(Op::I, s, m)) + " has no weight gradient: expected " + name(key(Op::W, s, m)));
        if (w && !i) fail(*w, name(key(Op::W, s, m)) + " has no input gradient: expected " + name(key(Op::I, s, m)));
        const bool policy = p_.recomputes(StageId{s}, MicrobatchId{m});
        if (r && !policy) {
          fail(*r, name(key(Op::R, s, m)) + ": recompute policy '" + std::string(recompute_name(p_.recompute)) +
                       "' does not checkpoint this micro-batch");
        }
        if (!r && policy) {
          const auto back = b ? b : i;
          fail(*back, "expected " + name(key(Op::R, s, m)) + " before " + to_string(p_.ranks[back->rank.value][back->step]) +
                          " (recompute policy '" + std::string(recompute_name(p_.recompute)) + "')");
        }
      }
    }
  }

  // `first` must come before `second` on their (common) rank.
  void require_before(const Key& first, const Key& second, const std::string& why) const {
    const auto a = find(first), b = find(second);
    if (a && b && a->step > b->step) {
      fail(*b, name(second) + " comes before " + name(first) + " (" + where(*a) + "), but " + why);
    }
  }

  void check_order() const {
    const int S = p_.num_stages();
    for (int s = 0; s < S; ++s) {
      const bool same_prev = s > 0 && p_.stage_to_rank[s - 1] == p_.stage_to_rank[s];
      const bool same_next = s + 1 < S && p_.stage_to_rank[s + 1] == p_.stage_to_rank[s];
      for (int m = 0; m < p_.num_microbatches; ++m) {
        const Key F = key(Op::F, s, m), R = key(Op::R, s, m), W = key(Op::W, s, m);
        const Key back = find(key(Op::B, s, m)) ? key(Op::B, s, m) : key(Op::I, s, m);
        require_before(F, back, "a backward needs its forward");
        require_before(F, R, "a recompute re-runs a forward that already ran");
        require_before(R, back, "the backward needs the recomputed activations");
        require_before(key(Op::I, s, m), W, "the weight gradient follows the input gradient");
        require_before(key(Op::RECV_F, s, m), F, "the forward needs the received activations");
        require_before(F, key(Op::SEND_F, s, m), "the activations are sent after the forward made them");
        require_before(key(Op::RECV_B, s, m), back, "the backward needs the received gradient");
        require_before(back, key(Op::SEND_B, s, m), "the gradient is sent after the backward made it");
        if (same_prev) require_before(key(Op::F, s - 1, m), F, "stage " + std::to_string(s) + " consumes its output");
        if (same_next) {
          const Key next_back = find(key(Op::B, s + 1, m)) ? key(Op::B, s + 1, m) : key(Op::I, s + 1, m);
          require_before(next_back, back, "its gradient comes from stage " + std::to_string(s + 1));
        }
        const Key last_back = find(W) ? W : back;
        require_before(last_back, key(Op::STEP, s, m), "the step applies this micro-batch's gradient");
        require_before(last_back, key(Op::STEP, s, -1), "the step applies every micro-batch's gradient");
      }
    }
  }

  // Every transfer crosses ranks along an existing edge and has its peer; every
  // cross-rank edge has its transfer.
  void check_transfers() const {
    const int S = p_.num_stages();
    for (int r = 0; r < p_.num_ranks; ++r) {
      for (std::size_t i = 0; i < p_.ranks[r].size(); ++i) {
        const Action& a = p_.ranks[r][i];
        if (!is_transfer(a.op)) continue;
        const Loc at{RankId{r}, i};
        const bool up = a.op == Op::SEND_F || a.op == Op::RECV_B;
        const int peer_stage = a.stage.value + (up ? 1 : -1);
        if (peer_stage < 0 || peer_stage >= S) {
          fail(at, to_string(a) + ": stage " + std::to_string(a.stage.value) + " is the " +
                       (up ? "last" : "first") + " stage; there is no stage " + std::to_string(peer_stage));
        }
        const RankId peer = p_.rank_of(StageId{peer_stage});
        if (peer.value == r) {
          fail(at, to_string(a) + ": stages " + std::to_string(a.stage.value) + " and " +
                       std::to_string(peer_stage) + " are both on rank " + std::to_string(r) +
                       "; no transfer between them");
        }
        const Action other = is_send(a.op) ? matching_recv(a) : matching_send(a);
        if (!find(key_of(other))) {
          fail(at, to_string(a) + " has no matching " + (is_send(a.op) ? "receive" : "send") + ": expected " +
                       to_string(other) + " on rank " + std::to_string(peer.value));
        }
      }
    }
    for (int s = 0; s + 1 < S; ++s) {
      if (p_.stage_to_rank[s] == p_.stage_to_rank[s + 1]) continue;
      for (int m = 0; m < p_.num_microbatches; ++m) {
        if (!find(key(Op::RECV_F, s + 1, m))) {
          fail(*find(key(Op::F, s + 1, m)), name(key(Op::F, s + 1, m)) + " never receives its input: expected " +
                                                 name(key(Op::RECV_F, s + 1, m)) + " (from " +
                                                 name(key(Op::SEND_F, s, m)) + ") before it");
        }
        const Key back = find(key(Op::B, s, m)) ? key(Op::B, s, m) : key(Op::I, s, m);
        if (!find(key(Op::RECV_B, s, m))) {
          fail(*find(back), name(back) + " never receives its gradient: expected " + name(key(Op::RECV_B, s, m)) +
                                " (from " + name(key(Op::SEND_B, s + 1, m)) + ") before it");
        }
      }
    }
  }

  void check_progress(const DryRun& run) const {
    if (!run.deadlocked()) return;
    std::string what = "deadlock: no rank can make progress";
    std::vector<GridMark> marks;
    for (const auto& b : run.blocked) {
      const RankId peer = p_.rank_of(b.waiting_for.stage);
      const auto& peer_actions = p_.ranks[peer.value];
      std::string peer_state = "which has finished without sending it";
      for (const auto& other : run.blocked) {
        if (other.rank == peer) {
          peer_state = "which is itself blocked at step " + std::to_string(other.step) + " (" +
                       to_string(peer_actions[other.step]) + ")";
        }
      }
      what += "\n  rank " + std::to_string(b.rank.value) + ", step " + std::to_string(b.step) + " (" +
              to_string(b.action) + ") waits for " + to_string(b.waiting_for) + " from rank " +
              std::to_string(peer.value) + ", " + peer_state;
      marks.push_back({b.rank, b.step});
    }
    const auto& first = run.blocked.front();
    throw ScheduleError(first.rank, first.step, what, format_order_grid(p_, marks));
  }

 private:
  const Program& p_;
  ActionIndex index_;
};

void check_shape(const Program& p) {
  const auto bad = [](const std::string& what) { throw Error("invalid schedule: " + what); };
  if (p.num_ranks < 1) bad("ranks must be at least 1, got " + std::to_string(p.num_ranks));
  if (p.stages_per_rank < 1) bad("stages per rank must be at least 1, got " + std::to_string(p.stages_per_rank));
  if (p.num_microbatches < 1) bad("micro-batches must be at least 1, got " + std::to_string(p.num_microbatches));
  if (static_cast<std::int64_t>(p.num_ranks) * p.stages_per_rank > kMaxStages) {
    bad(std::to_string(p.num_ranks) + " ranks x " + std::to_string(p.stages_per_rank) + " stages per rank is more than " +
        std::to_string(kMaxStages) + " stages");
  }
  if (p.tensor_parallel < 1 || p.tensor_parallel > kMaxParallel) {
    bad("tensor_parallel must be between 1 and " + std::to_string(kMaxParallel) + ", got " + std::to_string(p.tensor_parallel));
  }
  if (p.data_parallel < 1 || p.data_parallel > kMaxParallel) {
    bad("data_parallel must be between 1 and " + std::to_string(kMaxParallel) + ", got " + std::to_string(p.data_parallel));
  }
  if (p.num_devices() > std::numeric_limits<int>::max()) {
    bad("tensor_parallel x ranks x data_parallel is " + std::to_string(p.num_devices()) + " devices, more than " +
        std::to_string(std::numeric_limits<int>::max()));
  }
  if (p.sequence_parallel && p.tensor_parallel == 1) bad("sequence_parallel needs tensor_parallel > 1");
  if (p.zero < 0 || p.zero > 3) bad("zero (ZeRO's stage) must be 0, 1, 2 or 3, not " + std::to_string(p.zero));
  if (p.zero > 0 && p.data_parallel == 1) bad("zero " + std::to_string(p.zero) + " (ZeRO) needs data_parallel > 1");
  if (p.shard_group != 0 && (p.zero == 0 || p.shard_group < 1 || p.data_parallel % p.shard_group != 0)) {
    bad("shard_group " + std::to_string(p.shard_group) + " needs zero 1, 2 or 3 and must divide data_parallel " +
        std::to_string(p.data_parallel));
  }
  if (p.context_parallel < 1 || p.data_parallel % p.context_parallel != 0) {
    bad("context_parallel " + std::to_string(p.context_parallel) + " must be at least 1 and divide data_parallel " +
        std::to_string(p.data_parallel) + " (D counts every context-parallel rank)");
  }
  if (p.expert_tensor_parallel != 0 && p.expert_tensor_parallel != 1 && p.expert_tensor_parallel != p.tensor_parallel) {
    bad("expert_tensor_parallel " + std::to_string(p.expert_tensor_parallel) + " must be 1 or tensor_parallel " +
        std::to_string(p.tensor_parallel));
  }
  if (p.folds_experts() && p.expert_parallel % p.tensor_parallel != 0) {
    bad("expert_parallel " + std::to_string(p.expert_parallel) + " must be a multiple of tensor_parallel " +
        std::to_string(p.tensor_parallel) + " with expert_tensor_parallel 1 (the tensor group's devices each take experts)");
  }
  if (p.expert_parallel < 1 || p.data_parallel % p.expert_replicas() != 0) {
    bad("expert_parallel " + std::to_string(p.expert_parallel) + " must be at least 1 and divide data_parallel " +
        std::to_string(p.data_parallel) + (p.folds_experts() ? " times tensor_parallel" : "") +
        " (the experts are split over replicas)");
  }
  if (static_cast<int>(p.ranks.size()) != p.num_ranks) {
    bad("holds action lists for " + std::to_string(p.ranks.size()) + " ranks, expected " +
        std::to_string(p.num_ranks));
  }
  if (static_cast<int>(p.stage_to_rank.size()) != p.num_stages()) {
    bad("stage_to_rank maps " + std::to_string(p.stage_to_rank.size()) + " stages, expected " +
        std::to_string(p.num_stages()));
  }
  for (int s = 0; s < p.num_stages(); ++s) {
    const int r = p.stage_to_rank[s].value;
    if (r < 0 || r >= p.num_ranks) bad("stage " + std::to_string(s) + " is mapped to rank " + std::to_string(r) + ", which does not exist");
  }
  if (!p.partition.empty() && static_cast<int>(p.partition.size()) != p.num_stages()) {
    bad("partition has " + std::to_string(p.partition.size()) + " ranges, expected one per stage (" +
        std::to_string(p.num_stages()) + ")");
  }
  for (std::size_t s = 0; s < p.partition.size(); ++s) {
    const int expected_begin = s == 0 ? 0 : p.partition[s - 1].end;
    if (p.partition[s].begin != expected_begin || p.partition[s].end <= p.partition[s].begin) {
      bad("partition of stage " + std::to_string(s) + " is " + std::to_string(p.partition[s].begin) + ":" +
          std::to_string(p.partition[s].end) + "; stages hold non-empty contiguous layer ranges starting at " +
          std::to_string(expected_begin));
    }
  }
  if (static_cast<int>(p.weight_versions.size()) != p.num_stages()) {
    bad("weight_versions has " + std::to_string(p.weight_versions.size()) + " entries, expected " +
        std::to_string(p.num_stages()));
  }
  for (int s = 0; s < p.num_stages(); ++s) {
    if (p.weight_versions[s] < 1) {
      bad("weight_versions of stage " + std::to_string(s) + " is " + std::to_string(p.weight_versions[s]) +
          ": a stage holds at least 1 version of its weights");
    }
  }
}

}  // namespace

ValidationReport validate(const Program& input) {
  check_shape(input);
  Checker(input).check_ranges();
  ValidationReport report;
  report.program = input.has_transfers() ? input : lower(input);
  report.lowered = !(report.program == input);
  Checker checker(report.program);
  checker.index_actions();
  checker.check_stage_microbatches();
  checker.check_completeness();
  checker.check_order();
  checker.check_transfers();
  check_unshards(report.program);
  report.dry_run = dry_run(report.program);
  checker.check_progress(report.dry_run);
  report.memory = account_memory(report.program);
  return report;
}

std::string ValidationReport::summary() const {
  const Program& p = program;
  char bubble[32];
  std::snprintf(bubble, sizeof bubble, "%.2f%%", 100.0 * dry_run.timeline.bubble_fraction());
  char steps[32];
  std::snprintf(steps, sizeof steps, "%g", dry_run.timeline.makespan());
  int peak = 0;
  for (const auto& m : memory) peak = std::max(peak, m.peak_in_flight);
  return "valid: " + p.schedule + ", K=" + std::to_string(p.num_ranks) + " V=" + std::to_string(p.stages_per_rank) +
         " M=" + std::to_string(p.num_microbatches) + ", recompute " + std::string(recompute_name(p.recompute)) +
         ", " + std::to_string(p.num_actions()) + " actions" + (lowered ? " (transfers inserted)" : "") +
         ", unit-time dry run " + steps + " steps, bubble " + bubble + ", peak stash " + std::to_string(peak) +
         " micro-batches";
}

}  // namespace pipetwin::schedule
