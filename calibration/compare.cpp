// compare(): match two traces action by action and measure the errors (the
// checks that they go together: compare_checks.cpp; the report: compare_report.cpp).
#include "calibration/compare.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "calibration/traces.hpp"
#include "schedule/error.hpp"

namespace pipetwin::calibration {
namespace {

using nlohmann::json;
using schedule::Op;

// (rank, op, stage, micro-batch or -1)
using Key = std::tuple<int, int, int, int>;

Key key_of(int rank, const schedule::Action& a) {
  return {rank, static_cast<int>(a.op), a.stage.value, a.microbatch ? a.microbatch->value : -1};
}

std::map<Key, const schedule::TimedAction*> index_actions(const schedule::Trace& trace, const std::string& file) {
  std::map<Key, const schedule::TimedAction*> index;
  const auto& ranks = trace.timeline.ranks;
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) {
    for (const auto& t : ranks[r]) {
      if (!index.emplace(key_of(r, t.action), &t).second) {
        throw Error(file + ": rank " + std::to_string(r) + " holds action " + schedule::to_string(t.action) +
                    " twice: actions must match one to one");
      }
    }
  }
  if (index.empty()) throw Error(file + ": no actions (the trace holds no \"ph\":\"X\" event)");
  return index;
}

const char* kind_of(Op op) {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::I: return "I";
    case Op::W: return "W";
    case Op::R: return "R";
    case Op::STEP: return "STEP";
    case Op::REDUCE_GRAD: return "REDUCE_GRAD";
    case Op::UNSHARD: return "UNSHARD";
    case Op::RESHARD: return "RESHARD";
    case Op::SEND_F:
    case Op::SEND_B: return "sends";
    case Op::RECV_F:
    case Op::RECV_B: return "receives";
  }
  return "?";
}

std::optional<double> median_or_none(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The stash peaks a trace records, and the field they came from.
std::pair<std::optional<std::vector<double>>, std::string> stash_of(const json& meta, const std::string& file) {
  const auto numbers = [&](const json& list, const char* field, const char* where) -> std::vector<double> {
    std::vector<double> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const json& v = field ? (list[i].is_object() && list[i].contains(field) ? list[i][field] : json()) : list[i];
      if (!v.is_number()) {
        throw Error(file + ": otherData field '" + std::string(where) + "' entry " + std::to_string(i) +
                    " is not a number of bytes");
      }
      out.push_back(v.get<double>());
    }
    return out;
  };
  if (meta.contains("measured") && meta["measured"].is_object() && meta["measured"].contains("stages") &&
      meta["measured"]["stages"].is_array()) {
    return {numbers(meta["measured"]["stages"], "peak_stash_bytes", "measured.stages[].peak_stash_bytes"),
            "measured.stages[].peak_stash_bytes"};
  }
  if (meta.contains("predicted_stash_bytes_per_stage") && meta["predicted_stash_bytes_per_stage"].is_array()) {
    return {numbers(meta["predicted_stash_bytes_per_stage"], nullptr, "predicted_stash_bytes_per_stage"),
            "predicted_stash_bytes_per_stage"};
  }
  return {std::nullopt, ""};
}

}  // namespace

std::optional<double> Delta::relative() const {
  if (measured != 0) return error() / measured;
  if (predicted == 0) return 0.0;
  return std::nullopt;
}

namespace {

using Index = std::map<Key, const schedule::TimedAction*>;

// Every action of `from` is in `other`, in each rank's time order, so that
// the first action missing is named.
void check_all_in(const schedule::Trace& from, const std::string& from_file, const Index& other,
                  const std::string& other_file) {
  for (int r = 0; r < static_cast<int>(from.timeline.ranks.size()); ++r) {
    for (const auto& t : from.timeline.ranks[r]) {
      if (other.count(key_of(r, t.action))) continue;
      throw Error(other_file + ": rank " + std::to_string(r) + " has no action " + schedule::to_string(t.action) + " (" +
                  from_file + "'s rank " + std::to_string(r) + " has it): actions must match one to one");
    }
  }
}

// Per kind of action, in a fixed order; and the largest single errors.
void compare_actions(const schedule::Timeline& pt, const Index& m_index, Comparison& c) {
  struct Acc {
    int actions = 0, without = 0;
    Delta total;
    std::vector<double> rel, abs_rel;
  };
  std::map<std::string, Acc> acc;
  for (int r = 0; r < static_cast<int>(pt.ranks.size()); ++r) {
    for (const auto& p : pt.ranks[r]) {
      const auto& m = *m_index.at(key_of(r, p.action));
      const MatchedAction a{r, p.action, p.start, p.end, m.start, m.end};
      if (!c.largest_duration_error || std::fabs(a.duration_error()) > std::fabs(c.largest_duration_error->duration_error())) {
        c.largest_duration_error = a;
      }
      if (!c.largest_start_error || std::fabs(a.start_error()) > std::fabs(c.largest_start_error->start_error())) {
        c.largest_start_error = a;
      }
      auto& k = acc[kind_of(p.action.op)];
      ++k.actions;
      const Delta d{p.end - p.start, m.end - m.start};
      k.total.predicted += d.predicted;
      k.total.measured += d.measured;
      if (const auto rel = d.relative()) {
        k.rel.push_back(*rel);
        k.abs_rel.push_back(std::fabs(*rel));
      } else {
        ++k.without;
      }
    }
  }
  for (const char* kind : {"F", "B", "I", "W", "R", "STEP", "REDUCE_GRAD", "sends", "receives"}) {
    const auto it = acc.find(kind);
    if (it == acc.end()) continue;
    const auto& k = it->second;
    c.op_kinds.push_back({kind, k.actions, k.total, median_or_none(k.rel), median_or_none(k.abs_rel), k.without});
  }
}

// The stash bytes per stage both traces record, side by side (or why not).
void compare_stash(const json& p_meta, const std::string& pf, const json& m_meta, const std::string& mf, Comparison& c) {
  const auto [p_stash, p_source] = stash_of(p_meta, pf);
  const auto [m_stash, m_source] = stash_of(m_meta, mf);
  if (!p_stash || !m_stash) {
    std::string lacking = !p_stash && !m_stash ? pf + " and " + mf : !p_stash ? pf : mf;
    c.stash_note = lacking + (!p_stash && !m_stash ? " record" : " records") +
                   " no stash bytes per stage (neither otherData.measured.stages[].peak_stash_bytes nor "
                   "otherData.predicted_stash_bytes_per_stage): no memory comparison";
    return;
  }
  if (p_stash->size() != m_stash->size()) {
    throw Error(mf + ": otherData field '" + m_source + "' has " + std::to_string(m_stash->size()) + " stages but " + pf +
                "'s '" + p_source + "' has " + std::to_string(p_stash->size()) +
                ": the traces describe different configurations");
  }
  for (std::size_t s = 0; s < p_stash->size(); ++s) c.stash_bytes_per_stage.push_back({(*p_stash)[s], (*m_stash)[s]});
  c.stash_predicted_source = p_source;
  c.stash_measured_source = m_source;
}

}  // namespace

Comparison compare(const schedule::Trace& predicted, const std::string& pf, const schedule::Trace& measured,
                   const std::string& mf) {
  Comparison c;
  c.predicted_file = pf;
  c.measured_file = mf;
  // The two files given the wrong way round: a run's trace first, a
  // simulation's second (two simulations, or two runs, may be compared).
  if (producer_of(predicted.metadata) == "pipetwin run" && producer_of(measured.metadata) == "pipetwin simulate") {
    throw Error(pf + ": otherData field 'producer' is \"pipetwin run\" (a measured trace) and " + mf +
                " was predicted (\"pipetwin simulate\"): give the predicted trace first, pipetwin compare PREDICTED MEASURED");
  }
  c.configuration = same_configuration(predicted.metadata, pf, measured.metadata, mf);
  const auto p_index = index_actions(predicted, pf);
  const auto m_index = index_actions(measured, mf);
  check_all_in(predicted, pf, m_index, mf);
  check_all_in(measured, mf, p_index, pf);

  const auto& pt = predicted.timeline;
  const auto& mt = measured.timeline;
  c.matched_actions = static_cast<int>(p_index.size());
  c.step_time_s = {pt.makespan(), mt.makespan()};
  c.bubble_fraction = {pt.bubble_fraction(), mt.bubble_fraction()};
  if (const auto recorded = recorded_bubble(measured.metadata, mf)) {
    c.bubble_over_steps = {pt.bubble_fraction(), recorded->median};
    c.bubble_steps = recorded->steps;
  }
  const int ranks = static_cast<int>(std::max(pt.ranks.size(), mt.ranks.size()));
  for (int r = 0; r < ranks; ++r) {
    const auto busy = [r](const schedule::Timeline& tl) {
      return r < static_cast<int>(tl.ranks.size()) ? tl.busy(schedule::RankId{r}) : 0.0;
    };
    c.busy_s_per_rank.push_back({busy(pt), busy(mt)});
  }
  compare_actions(pt, m_index, c);
  compare_stash(predicted.metadata, pf, measured.metadata, mf, c);
  c.noise = Noise::of_trace(measured.metadata);
  c.step_judgement = judge(c.step_time_s.relative(), c.noise);
  c.bubble_judgement = judge_bubble(c.bubble_steps > 0 ? c.bubble_over_steps.error() : c.bubble_fraction.error(),
                                    c.noise, 0, 1);
  return c;
}

}  // namespace pipetwin::calibration
