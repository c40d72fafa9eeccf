// The comparison's report: Comparison::to_json() and the aligned text of to_text().
#include "calibration/compare.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

namespace pipetwin::calibration {
namespace {

using nlohmann::json;

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
