// compare(): match two traces action by action and measure the errors.
#include "calibration/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "calibration/traces.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/trace_metadata.hpp"

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

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
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

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json delta_json(const Delta& d) {
  return {{"predicted", d.predicted}, {"measured", d.measured}, {"error", d.error()}, {"relative_error", opt(d.relative())}};
}

json action_json(const MatchedAction& a) {
  return {{"rank", a.rank},
          {"action", schedule::to_string(a.action)},
          {"predicted_start_s", a.predicted_start},
          {"predicted_duration_s", a.predicted_end - a.predicted_start},
          {"measured_start_s", a.measured_start},
          {"measured_duration_s", a.measured_end - a.measured_start},
          {"duration_error_s", a.duration_error()},
          {"start_error_s", a.start_error()}};
}

// Seconds in a readable unit, signed when asked.
std::string t(double s, bool sign = false) {
  const double a = std::fabs(s);
  char buf[64];
  const char* f = sign ? "%+.4g %s" : "%.4g %s";
  if (a == 0) std::snprintf(buf, sizeof buf, sign ? "%+.4g s" : "%.4g s", 0.0);
  else if (a < 1e-3) std::snprintf(buf, sizeof buf, f, s * 1e6, "us");
  else if (a < 1) std::snprintf(buf, sizeof buf, f, s * 1e3, "ms");
  else std::snprintf(buf, sizeof buf, f, s, "s");
  return buf;
}

std::string pct(const std::optional<double>& r) {
  if (!r) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", 100 * *r);
  return buf;
}

std::string bytes(double b, bool sign = false) {
  const double a = std::fabs(b);
  const auto [div, unit] = a >= 1e9 ? std::pair{1e9, "GB"} : a >= 1e6 ? std::pair{1e6, "MB"} : a >= 1e3 ? std::pair{1e3, "kB"}
                                                                                                 : std::pair{1.0, "B"};
  char buf[48];
  std::snprintf(buf, sizeof buf, sign ? "%+.4g %s" : "%.4g %s", b / div, unit);
  return buf;
}

std::string unsigned_pct(const std::optional<double>& r) {
  if (!r) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100 * *r);
  return buf;
}

// "transformer-small, 1f1b, K=2 V=1 M=8, micro-batch 4, recompute none, partition [[0,3],[3,6]]"
std::string describe(const json& c) {
  const auto str = [&](const char* k) { return c.contains(k) ? (c[k].is_string() ? c[k].get<std::string>() : c[k].dump()) : ""; };
  std::vector<std::string> parts;
  for (const char* k : {"model", "schedule"}) {
    if (c.contains(k)) parts.push_back(str(k));
  }
  std::string shape;
  for (const auto& [k, label] : {std::pair{"ranks", "K="}, std::pair{"stages_per_rank", "V="}, std::pair{"microbatches", "M="}}) {
    if (c.contains(k)) shape += (shape.empty() ? "" : " ") + std::string(label) + str(k);
  }
  if (!shape.empty()) parts.push_back(shape);
  if (c.contains("microbatch_size")) parts.push_back("micro-batch " + str("microbatch_size"));
  if (c.contains("recompute")) parts.push_back("recompute " + str("recompute"));
  if (c.contains("partition")) parts.push_back("partition " + str("partition"));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

std::string producer_of(const json& meta) {
  return meta.contains("producer") && meta["producer"].is_string() ? meta["producer"].get<std::string>() : "";
}

json same_configuration(const json& p, const std::string& pf, const json& m, const std::string& mf) {
  json shared = json::object();
  for (const auto& field : schedule::configuration_fields()) {
    const bool in_p = p.contains(field), in_m = m.contains(field);
    if (!in_p && !in_m) continue;
    if (in_p != in_m) {
      const auto& [has, has_file, lacks_file] = in_p ? std::tie(p, pf, mf) : std::tie(m, mf, pf);
      throw Error(lacks_file + ": otherData has no field '" + field + "' (" + has_file + " has " + show(has[field]) +
                  "): cannot check that the traces describe the same configuration");
    }
    if (p[field] != m[field]) {
      throw Error(mf + ": otherData field '" + field + "' is " + show(m[field]) + " but " + pf + " has " +
                  show(p[field]) + ": the traces describe different configurations");
    }
    shared[field] = p[field];
  }
  return shared;
}

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

int check_ran_schedule(const schedule::Trace& trace, const std::string& trace_file, schedule::Program schedule,
                       const std::string& schedule_file) {
  const json& meta = trace.metadata;
  if (!meta.is_object() || !meta.contains("program") || !meta["program"].is_string()) {
    throw Error(trace_file + ": otherData has no 'program' (the schedule a run or simulation followed, recorded since "
                "pipetwin 0.1.0's program-first core): it cannot be checked against " + schedule_file);
  }
  const schedule::Program ran = schedule::parse_text(meta["program"].get<std::string>(), trace_file + ": otherData.program");
  // A file without recompute of its own takes the run's policy, as run and simulate give it.
  if (schedule.leaves_recompute_open()) schedule.recompute = ran.recompute;
  schedule = schedule::lower(std::move(schedule));
  if (ran.num_ranks != schedule.num_ranks || ran.num_stages() != schedule.num_stages()) {
    throw Error(trace_file + ": ran " + std::to_string(ran.num_ranks) + " ranks and " + std::to_string(ran.num_stages()) +
                " stages, but " + schedule_file + " has " + std::to_string(schedule.num_ranks) + " ranks and " +
                std::to_string(schedule.num_stages()) + " stages: not the run of that schedule");
  }
  const auto kept = [](const std::vector<schedule::Action>& actions) {
    std::vector<schedule::Action> out;
    for (const auto& a : actions) {
      if (schedule::is_compute(a.op) || a.op == Op::STEP) out.push_back(a);
    }
    return out;
  };
  int checked = 0;
  for (int r = 0; r < schedule.num_ranks; ++r) {
    const auto a = kept(ran.ranks[r]), b = kept(schedule.ranks[r]);
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
      const auto at = [i](const std::vector<schedule::Action>& v) {
        return i < v.size() ? schedule::to_string(v[i]) : "nothing (it has " + std::to_string(v.size()) + ")";
      };
      const std::string theirs = at(a), ours = at(b);
      throw Error(trace_file + ": rank " + std::to_string(r) + "'s compute action " + std::to_string(i + 1) + " is " +
                  theirs + ", where " + schedule_file + " has " + ours + ": not the run of that schedule");
    }
    checked += static_cast<int>(a.size());
  }
  return checked;
}

json Comparison::to_json() const {
  json j{{"predicted", predicted_file}, {"measured", measured_file}, {"configuration", configuration},
         {"matched_actions", matched_actions}, {"step_time_s", delta_json(step_time_s)}};
  if (!schedule_file.empty()) j["schedule"] = {{"file", schedule_file}, {"actions_checked", schedule_actions}};
  j["bubble_fraction"] = {{"predicted", bubble_fraction.predicted},
                          {"measured", bubble_fraction.measured},
                          {"error_points", 100 * bubble_fraction.error()}};
  if (bubble_steps > 0) {
    j["bubble_fraction"]["measured_over_steps"] = {{"median", bubble_over_steps.measured},
                                                   {"steps", bubble_steps},
                                                   {"runs", bubble_runs},
                                                   {"error_points", 100 * bubble_over_steps.error()}};
    auto& over = j["bubble_fraction"]["measured_over_steps"];
    if (!bubble_run_medians.empty()) over["run_medians"] = bubble_run_medians, over["uncertainty_points"] = 100 * bubble_uncertainty;
  }
  j["busy_s_per_rank"] = json::array();
  for (std::size_t r = 0; r < busy_s_per_rank.size(); ++r) {
    auto d = delta_json(busy_s_per_rank[r]);
    d["rank"] = r;
    j["busy_s_per_rank"].push_back(d);
  }
  j["op_kinds"] = json::array();
  for (const auto& k : op_kinds) {
    j["op_kinds"].push_back({{"kind", k.kind},
                             {"actions", k.actions},
                             {"predicted_total_s", k.total_s.predicted},
                             {"measured_total_s", k.total_s.measured},
                             {"total_relative_error", opt(k.total_s.relative())},
                             {"median_relative_error", opt(k.median_relative_error)},
                             {"median_abs_relative_error", opt(k.median_abs_relative_error)},
                             {"actions_without_relative_error", k.without_relative}});
  }
  j["largest_duration_error"] = largest_duration_error ? action_json(*largest_duration_error) : json(nullptr);
  j["largest_start_error"] = largest_start_error ? action_json(*largest_start_error) : json(nullptr);
  json stash{{"predicted_source", stash_predicted_source}, {"measured_source", stash_measured_source}};
  stash["stages"] = json::array();
  for (std::size_t s = 0; s < stash_bytes_per_stage.size(); ++s) {
    auto d = delta_json(stash_bytes_per_stage[s]);
    d["stage"] = s;
    stash["stages"].push_back(d);
  }
  if (!stash_note.empty()) stash["missing"] = stash_note;
  j["stash_bytes_per_stage"] = stash;
  j["noise"] = noise ? json{{"other_share", noise->other_share},
                            {"steal_share", noise->steal_share},
                            {"share_resolution", noise->share_resolution},
                            {"median_uncertainty_rel", noise->median_uncertainty_rel},
                            {"band_rel", noise->band()},
                            {"step_spread_rel", noise->spread()},
                            {"counted_steps", noise->counted_steps},
                            {"compute_cpu_s", noise->compute_cpu_s}, {"compute_cpu_spread_rel", noise->compute_cpu_spread},
                            {"busy", noise->busy()}}
                     : json(nullptr);
  if (repeats) {
    j["repeats"] = {{"files", repeats->files},
                    {"steps_s", repeats->steps_s}, {"compute_cpu_s", repeats->compute_cpu_s},
                    {"median_s", repeats->median_s},
                    {"mad_s", repeats->mad_s},
                    {"median_uncertainty_rel", repeats->median_uncertainty_rel},
                    {"relative_error", repeats->median_s > 0 ? json(step_time_s.predicted / repeats->median_s - 1)
                                                             : json(nullptr)},
                    {"busy", repeats->busy}};
  }
  j["verdict"] = {{"step_time", verdict_name(step_judgement.verdict)}, {"why", step_judgement.why},
                  {"bubble", verdict_name(bubble_judgement.verdict)}, {"bubble_why", bubble_judgement.why}};
  return j;
}

std::string Comparison::to_text() const {
  std::ostringstream o;
  char line[512];
  o << "compare      " << predicted_file << " (predicted) against " << measured_file << " (measured)\n";
  if (!configuration.empty()) o << "config       " << describe(configuration) << "\n";
  if (!schedule_file.empty()) {
    o << "schedule     both traces ran " << schedule_file << "'s order (" << schedule_actions
      << " compute and optimizer actions, checked one by one)\n";
  }
  std::snprintf(line, sizeof line, "matched      %d actions on %zu ranks, one to one\n", matched_actions,
                busy_s_per_rank.size());
  o << line;
  o << "step time    predicted " << t(step_time_s.predicted) << ", measured " << t(step_time_s.measured) << ": error "
    << t(step_time_s.error(), true) << " (" << pct(step_time_s.relative()) << ")\n";
  std::snprintf(line, sizeof line, "bubble       predicted %.2f%%, measured %.2f%%: error %+.2f points\n",
                100 * bubble_fraction.predicted, 100 * bubble_fraction.measured, 100 * bubble_fraction.error());
  o << line;
  if (bubble_steps > 0) {
    const std::string runs = bubble_runs > 1 ? " of " + std::to_string(bubble_runs) + " runs" : "";
    std::snprintf(line, sizeof line, "             measured over %d steps%s (their median): %.2f%%: error %+.2f points\n",
                  bubble_steps, runs.c_str(), 100 * bubble_over_steps.measured, 100 * bubble_over_steps.error());
    o << line;
  }
  o << "busy         per rank, predicted / measured: error\n";
  for (std::size_t r = 0; r < busy_s_per_rank.size(); ++r) {
    const auto& d = busy_s_per_rank[r];
    o << "  rank " << r << ": " << t(d.predicted) << " / " << t(d.measured) << ": " << t(d.error(), true) << " ("
      << pct(d.relative()) << ")\n";
  }
  o << "durations    per kind of action: count, total predicted / measured, total error, median error, median |error|\n";
  for (const auto& k : op_kinds) {
    std::snprintf(line, sizeof line, "  %-9s %5d  %10s / %-10s %9s %9s %9s%s\n", k.kind.c_str(), k.actions,
                  t(k.total_s.predicted).c_str(), t(k.total_s.measured).c_str(), pct(k.total_s.relative()).c_str(),
                  pct(k.median_relative_error).c_str(), unsigned_pct(k.median_abs_relative_error).c_str(),
                  k.without_relative ? (" (" + std::to_string(k.without_relative) + " measured at 0 s)").c_str() : "");
    o << line;
  }
  if (largest_duration_error) {
    const auto& a = *largest_duration_error;
    o << "largest      duration error: rank " << a.rank << " " << schedule::to_string(a.action) << " took "
      << t(a.predicted_end - a.predicted_start) << " predicted, " << t(a.measured_end - a.measured_start)
      << " measured (" << t(a.duration_error(), true) << ")\n";
  }
  if (largest_start_error) {
    const auto& a = *largest_start_error;
    o << "             start error: rank " << a.rank << " " << schedule::to_string(a.action) << " started at "
      << t(a.predicted_start) << " predicted, " << t(a.measured_start) << " measured (" << t(a.start_error(), true)
      << ")\n";
  }
  if (!stash_note.empty()) {
    o << "stash        " << stash_note << "\n";
  } else {
    o << "stash        peak bytes per stage, " << stash_predicted_source << " / " << stash_measured_source << ": error\n";
    for (std::size_t s = 0; s < stash_bytes_per_stage.size(); ++s) {
      const auto& d = stash_bytes_per_stage[s];
      o << "  stage " << s << ": " << bytes(d.predicted) << " / " << bytes(d.measured) << ": " << bytes(d.error(), true) << " ("
        << pct(d.relative()) << ")\n";
    }
  }
  o << "noise        " << (noise ? noise->describe() : "not recorded by the measured trace") << "\n";
  if (repeats) o << "repeats      " << repeats->describe() << "\n";
  o << "verdict      " << verdict_name(step_judgement.verdict) << ": " << step_judgement.why << "\n";
  o << "             the bubble: " << verdict_name(bubble_judgement.verdict) << ": " << bubble_judgement.why << "\n";
  return o.str();
}

}  // namespace pipetwin::calibration
