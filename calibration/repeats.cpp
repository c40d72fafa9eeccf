// Repeats of a measurement (`pipetwin compare --repeats`): other runs of the
// measured configuration, their spread from run to run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "calibration/compare.hpp"
#include "calibration/noise.hpp"
#include "calibration/traces.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::calibration {

namespace {

// Student's t at 97.5% for `dof` degrees of freedom: a handful of runs
// bound their median more loosely than the normal 1.96 says.
double t975(int dof) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086};
  if (dof < 1) return 0;
  return dof <= 20 ? table[dof - 1] : 1.96 + 2.4 / dof;
}

}  // namespace

Repeats Repeats::of(std::vector<std::string> files, std::vector<double> steps_s, int busy,
                    std::vector<double> compute_cpu_s) {
  Repeats r;
  const bool every = compute_cpu_s.size() == steps_s.size() &&
                     std::all_of(compute_cpu_s.begin(), compute_cpu_s.end(), [](double c) { return c > 0; });
  if (every) r.compute_cpu_s = std::move(compute_cpu_s);
  r.files = std::move(files);
  r.steps_s = std::move(steps_s);
  r.busy = busy;
  r.median_s = median(r.steps_s);
  r.mad_s = schedule::mad(r.steps_s, r.median_s);
  // As a run's own steps (exec/host_load.cpp), the runs taken as independent
  // draws of the machine's pace: the median's 95% interval from the MAD, with
  // Student's t for n - 1 degrees of freedom in place of 1.96.
  const std::size_t n = r.steps_s.size();
  r.median_uncertainty_rel = schedule::median_half_width_rel(t975(static_cast<int>(n) - 1), r.mad_s, r.median_s, n);
  return r;
}

std::string Repeats::describe() const {
  char line[512];
  const auto [lo, hi] = std::minmax_element(steps_s.begin(), steps_s.end());
  std::string known = steps_s.size() < 3 ? " (fewer than 3 runs: unknown)" : " (their steps equal: no spread to tell)";
  if (median_uncertainty_rel > 0) {
    std::snprintf(line, sizeof line, ", their median known to +-%.1f%% (95%%)", 100 * median_uncertainty_rel);
    known = line;
  }
  std::snprintf(line, sizeof line, "%zu runs of this configuration: steps %.4g to %.4g ms, median %.4g ms, spread %.1f%%%s%s",
                steps_s.size(), steps_s.empty() ? 0 : 1e3 * *lo, steps_s.empty() ? 0 : 1e3 * *hi, 1e3 * median_s,
                median_s > 0 ? 100 * mad_s / median_s : 0.0, known.c_str(),
                busy > 0 ? ("; " + std::to_string(busy) + " more measured on a busy machine, left out").c_str() : "");
  std::string out = line;
  if (compute_cpu_s.size() > 1) {
    // The same work in every run: where its CPU time moves as the steps do,
    // the host's pace moved, not the schedule's waits.
    const auto [clo, chi] = std::minmax_element(compute_cpu_s.begin(), compute_cpu_s.end());
    std::snprintf(line, sizeof line, "; the same compute took %.4g to %.4g ms of CPU a step in them (%.0f%% apart: the host's pace)",
                  1e3 * *clo, 1e3 * *chi, 100 * (*chi / *clo - 1));
    out += line;
  }
  return out;
}

void add_repeats(Comparison& c, const schedule::Trace& measured, const std::vector<schedule::Trace>& repeats,
                 const std::vector<std::string>& files) {
  // A quiet measured run is held against its quiet repeats only: a busy
  // one's pace is the load's (counted, said, left out).
  const bool quiet = !(c.noise && c.noise->busy());
  std::vector<std::string> names{c.measured_file};
  const auto first = recorded_bubble(measured.metadata, c.measured_file);
  std::vector<double> bubbles = first ? first->counted : std::vector<double>{};
  std::vector<double> run_bubbles;  // each run's median over its counted steps
  std::vector<double> within;       // each counted step's distance to its run's median
  const auto add_within = [&](const auto& recorded) {
    for (const double b : recorded.counted) within.push_back(b - recorded.median);
  };
  if (first) run_bubbles.push_back(first->median), add_within(*first);
  bool every_bubble = first.has_value();
  std::vector<double> steps{measured.timeline.makespan()};
  std::vector<double> cpu{c.noise ? c.noise->compute_cpu_s : 0.0};
  int busy = 0;
  for (std::size_t i = 0; i < repeats.size(); ++i) {
    const auto& r = repeats[i];
    const std::string& f = files.at(i);
    if (std::find(names.begin(), names.end(), f) != names.end()) {
      throw Error(f + ": given twice (the measured trace and its repeats must be different runs)");
    }
    const std::string producer = producer_of(r.metadata);
    if (producer != "pipetwin run" && producer != "torch.profiler") {
      throw Error(f + ": otherData field 'producer' is \"" + producer +
                  "\": a repeat must be a measured run (pipetwin run --trace, or a torch.profiler run)");
    }
    same_configuration(measured.metadata, c.measured_file, r.metadata, f);
    const auto noise = Noise::of_trace(r.metadata);
    const auto recorded = recorded_bubble(r.metadata, f);
    names.push_back(f);
    if (quiet && noise && noise->busy()) {
      ++busy;
      continue;
    }
    steps.push_back(r.timeline.makespan());
    cpu.push_back(noise ? noise->compute_cpu_s : 0.0);
    every_bubble = every_bubble && recorded.has_value();
    if (recorded) {
      bubbles.insert(bubbles.end(), recorded->counted.begin(), recorded->counted.end());
      run_bubbles.push_back(recorded->median);
      add_within(*recorded);
    }
  }
  c.repeats = Repeats::of(std::move(names), std::move(steps), busy, std::move(cpu));
  const int runs = static_cast<int>(c.repeats->steps_s.size());
  if (every_bubble && runs > 1) {
    c.bubble_over_steps.measured = median(bubbles);
    c.bubble_steps = static_cast<int>(bubbles.size());
    c.bubble_runs = runs;
    // How far the bubble moves from run to run bounds the pooled median: the
    // runs' medians as independent draws (the steps of one run are not: its
    // ranks keep the cores they were given), their median's 95% interval as
    // the steps' (Student's t, n - 1 degrees of freedom), in points.
    const double centre = median(run_bubbles);
    const std::size_t n = run_bubbles.size();
    const double t = t975(static_cast<int>(n) - 1);
    const double across = centre * schedule::median_half_width_rel(t, schedule::mad(run_bubbles, centre), centre, n);
    // Its floor: each run's median is itself a median of a few steps, known
    // no better than their spread within the run says (their MAD about the
    // run's median, pooled), whatever the runs' medians happen to agree to.
    // The median of n run medians of m steps each: 1.2533^2 sigma / sqrt(n m).
    const double sigma = 1.4826 * schedule::mad(within, 0);
    const double floor = within.empty() ? 0 : t * 1.2533 * 1.2533 * sigma / std::sqrt(static_cast<double>(within.size()));
    c.bubble_uncertainty = std::max(across, floor);
    c.bubble_run_medians = std::move(run_bubbles);
    c.bubble_judgement = judge_bubble(c.bubble_over_steps.error(), c.noise, c.bubble_uncertainty, runs);
  }
  // The prediction against the runs' median, which their interval bounds
  // (the measured trace's own step where it is that median, as the demo gives it).
  const std::optional<double> against = c.repeats->median_s > 0
                                            ? std::optional<double>(c.step_time_s.predicted / c.repeats->median_s - 1)
                                            : std::nullopt;
  c.step_judgement = judge(against, c.noise, c.repeats);
  char head[128];
  std::snprintf(head, sizeof head, "against the median of %d runs (%.4g ms): ", runs, 1e3 * c.repeats->median_s);
  if (c.step_judgement.verdict != Verdict::NotMeaningful) c.step_judgement.why = head + c.step_judgement.why;
}

NoiseFloor noise_floor(const std::vector<std::string>& configurations, const std::vector<double>& relative_errors) {
  std::map<std::string, std::vector<double>> by;
  for (std::size_t i = 0; i < configurations.size() && i < relative_errors.size(); ++i) {
    by[configurations[i]].push_back(relative_errors[i]);
  }
  NoiseFloor f;
  double within = 0, squares = 0;
  int freedom = 0;
  std::vector<double> counts;
  for (const auto& [name, errors] : by) {
    double mean = 0;
    for (const double e : errors) mean += e / static_cast<double>(errors.size());
    squares += mean * mean;
    f.mean_error_worst_rel = std::max(f.mean_error_worst_rel, std::abs(mean));
    counts.push_back(static_cast<double>(errors.size()));
    if (errors.size() < 2) continue;
    ++f.configurations;
    f.runs += static_cast<int>(errors.size());
    for (const double e : errors) within += (e - mean) * (e - mean);
    freedom += static_cast<int>(errors.size()) - 1;
  }
  f.all_configurations = static_cast<int>(by.size());
  if (!by.empty()) f.mean_error_rms_rel = std::sqrt(squares / static_cast<double>(by.size()));
  if (freedom > 0) f.run_sd_rel = std::sqrt(within / freedom);
  if (!counts.empty()) f.typical_runs = median(counts);
  return f;
}

std::string NoiseFloor::describe() const {
  if (configurations == 0) return "";
  char line[512];
  std::snprintf(line, sizeof line,
                "%d runs of %d configuration(s) measured twice or more: a run's step error spreads +-%.1f%% (sd) about "
                "its configuration's, which no fit explains; the %d configurations' mean errors: rms %.1f%%, worst "
                "%.1f%% (noise alone gives about %.1f%% with %.3g runs each)",
                runs, configurations, 100 * run_sd_rel, all_configurations, 100 * mean_error_rms_rel,
                100 * mean_error_worst_rel, 100 * run_sd_rel / std::sqrt(std::max(1.0, typical_runs)), typical_runs);
  return line;
}

}  // namespace pipetwin::calibration
