// compare_files: the traces read, the schedule checked, then compared.
#include "twin/compare.hpp"

#include <algorithm>
#include <set>

#include "calibration/kineto.hpp"
#include "models/cost_table.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/trace.hpp"
#include "twin/calibrate_kineto.hpp"

namespace pipetwin::twin {

calibration::Comparison compare_files(const CompareRequest& o, std::vector<std::string>* notes) {
  const auto p = schedule::read_chrome_trace(o.predicted);
  const auto m = schedule::read_chrome_trace(o.measured);
  int checked = 0;
  if (!o.schedule.empty()) {
    const auto program = schedule::read_program(o.schedule, notes);
    calibration::check_ran_schedule(p, o.predicted, program, o.schedule);
    checked = calibration::check_ran_schedule(m, o.measured, program, o.schedule);
  }
  auto c = calibration::compare(p, o.predicted, m, o.measured);
  if (!o.repeats.empty()) {
    std::vector<schedule::Trace> repeats;
    for (const auto& f : o.repeats) repeats.push_back(schedule::read_chrome_trace(f));
    calibration::add_repeats(c, m, repeats, o.repeats);
  }
  c.schedule_file = o.schedule;
  c.schedule_actions = checked;
  return c;
}

namespace {

// Each timeline keeps the actions the other has (by rank and action).
void keep_common(schedule::Timeline& a, schedule::Timeline& b) {
  const auto keys = [](const schedule::Timeline& t) {
    std::set<std::pair<int, std::string>> k;
    for (int r = 0; r < static_cast<int>(t.ranks.size()); ++r) {
      for (const auto& x : t.ranks[r]) k.emplace(r, schedule::to_string(x.action));
    }
    return k;
  };
  const auto ka = keys(a), kb = keys(b);
  const auto keep = [](schedule::Timeline& t, const std::set<std::pair<int, std::string>>& other) {
    for (int r = 0; r < static_cast<int>(t.ranks.size()); ++r) {
      auto& actions = t.ranks[r];
      actions.erase(std::remove_if(actions.begin(), actions.end(),
                                   [&](const schedule::TimedAction& x) {
                                     return !schedule::is_compute(x.action.op) &&
                                            !other.count({r, schedule::to_string(x.action)});
                                   }),
                    actions.end());
    }
  };
  keep(a, kb);
  keep(b, ka);
}

}  // namespace

calibration::Comparison compare_costs(const CostsCompareRequest& o) {
  const auto run = calibration::read_kineto_run(o.measured, o.batch);
  const auto table = o.costs_text.empty() ? models::read_cost_table(o.costs) : models::parse_cost_table(o.costs_text, o.costs);
  const auto sc = kineto_scenario(run, table);
  schedule::Trace predicted;
  predicted.timeline = predict(*sc, Engine::Fast).timeline;
  predicted.metadata = calibration::kineto_configuration(run);
  predicted.metadata["producer"] = "pipetwin simulate";
  predicted.metadata["program"] = schedule::to_text(sc->program);
  predicted.metadata["costs"] = o.costs;
  auto measured = calibration::kineto_trace(run);
  keep_common(predicted.timeline, measured.timeline);
  auto c = calibration::compare(predicted, o.costs, measured, o.measured);
  if (!o.repeats.empty()) {
    std::vector<schedule::Trace> repeats;
    for (const auto& f : o.repeats) {
      const auto r = calibration::read_kineto_run(f, o.batch);
      if (schedule::to_text(r.program) != schedule::to_text(run.program)) {
        throw Error(f + ": its ranks ran another order of actions than " + o.measured + "'s: a repeat must be a run of the same schedule");
      }
      repeats.push_back(calibration::kineto_trace(r));
    }
    calibration::add_repeats(c, measured, repeats, o.repeats);
  }
  if (!o.traces.empty()) {
    schedule::write_chrome_trace(o.traces + ".predicted.json", predicted);
    schedule::write_chrome_trace(o.traces + ".measured.json", measured);
  }
  return c;
}

}  // namespace pipetwin::twin
