// compare_files: the traces read, the schedule checked, then compared.
#include "twin/compare.hpp"

#include "schedule/io.hpp"
#include "schedule/trace.hpp"

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

}  // namespace pipetwin::twin
