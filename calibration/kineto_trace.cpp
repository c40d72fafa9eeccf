// A torch.profiler run as one of pipetwin's measured traces: what compare,
// its repeats and the gantt plot read.
#include <algorithm>

#include "calibration/kineto.hpp"
#include "calibration/noise.hpp"
#include "schedule/io.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
using nlohmann::json;

json kineto_configuration(const KinetoRun& run) {
  return {{"model", "torch.profiler run"},
          {"hardware", run.host},
          {"schedule", run.program.schedule},
          {"ranks", run.program.num_ranks},
          {"stages_per_rank", run.program.stages_per_rank},
          {"microbatches", run.program.num_microbatches},
          {"microbatch_size", std::max(1, static_cast<int>(run.samples_per_microbatch))},
          {"recompute", std::string(ps::recompute_name(run.program.recompute))},
          {"partition", json::array()}};
}

schedule::Trace kineto_trace(const KinetoRun& run) {
  schedule::Trace t;
  // The median step, as pipetwin run's traces hold theirs (every profiled step counts).
  const int step = static_cast<int>(ps::median_index(run.step_times_s));
  t.timeline = run.timeline(step);
  json meta = kineto_configuration(run);
  meta["producer"] = "torch.profiler";
  meta["program"] = ps::to_text(run.program);
  std::vector<double> bubbles;
  for (int k = 0; k < run.num_steps(); ++k) bubbles.push_back(run.timeline(k).bubble_fraction());
  // Every profiled step counts (the run's warm-up steps were not profiled).
  const auto r = Repeats::of(std::vector<std::string>(run.step_times_s.size(), run.path), run.step_times_s, 0);
  meta["measured"] = {{"steps", run.num_steps()},
                      {"step_times_s", run.step_times_s},
                      {"bubble_fractions", bubbles},
                      {"representative_step", step},
                      {"files", run.files},
                      {"noise",
                       {{"first_counted_step", 0},
                        {"counted_steps", run.num_steps()},
                        {"step_median_s", r.median_s},
                        {"step_mad_s", r.mad_s},
                        {"median_uncertainty_rel", r.median_uncertainty_rel}}}};
  t.metadata = std::move(meta);
  return t;
}

}  // namespace pipetwin::calibration
