// The checks that two traces go together: the same configuration in their
// otherData, and a trace that ran a given schedule file's order.
#include "calibration/compare.hpp"

#include <algorithm>
#include <tuple>
#include <vector>

#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/trace_metadata.hpp"

namespace pipetwin::calibration {
namespace {

using nlohmann::json;
using schedule::Op;

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
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

}  // namespace pipetwin::calibration
