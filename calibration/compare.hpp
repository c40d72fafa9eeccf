// Predicted against measured: how far one step's predicted timeline (sim/,
// `pipetwin simulate --trace`) is from the measured one (exec/, `pipetwin run
// --trace`), or any two traces of the same configuration. Actions are matched
// one to one by (rank, op, stage, micro-batch); the report gives the errors of
// the step time, the bubble, each rank's busy time, each kind of action's
// durations, the largest single mispredictions, and the peak stashed memory
// of every stage. Every error is predicted - measured, relative ones are
// divided by the measured value, so a trace compared with itself is exactly 0.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "calibration/noise.hpp"
#include "schedule/trace.hpp"
#include "schedule/trace_metadata.hpp"

namespace pipetwin::calibration {

// One quantity, predicted and measured.
struct Delta {
  double predicted = 0;
  double measured = 0;
  double error() const { return predicted - measured; }
  // error / measured; 0 when both are 0; none when only the measured one is 0.
  std::optional<double> relative() const;
};

// The durations of one kind of action: F, B, I, W, R, STEP, REDUCE_GRAD,
// "sends" (SEND_F and SEND_B) or "receives" (RECV_F and RECV_B).
struct OpKindErrors {
  std::string kind;
  int actions = 0;
  Delta total_s;                                  // summed durations
  std::optional<double> median_relative_error;    // of the per-action relative errors
  std::optional<double> median_abs_relative_error;
  int without_relative = 0;  // actions measured at 0 s but predicted longer (no relative error)
};

// One matched action, as each trace has it.
struct MatchedAction {
  int rank = 0;
  schedule::Action action;
  double predicted_start = 0, predicted_end = 0;
  double measured_start = 0, measured_end = 0;
  double duration_error() const { return (predicted_end - predicted_start) - (measured_end - measured_start); }
  double start_error() const { return predicted_start - measured_start; }
};

struct Comparison {
  std::string predicted_file, measured_file;
  std::string schedule_file;  // compare --schedule: the file both traces were checked to have run
  int schedule_actions = 0;   // its compute and optimizer actions, on all ranks
  nlohmann::json configuration;  // the shared fields (model, schedule, K, V, M, ...) that were checked
  int matched_actions = 0;
  Delta step_time_s;
  Delta bubble_fraction;  // its error in points is 100 * error()
  // Where the measured trace recorded every step's bubble
  // (measured.bubble_fractions): the prediction against their median (the
  // warm-up left out), over bubble_steps steps; else 0 steps.
  Delta bubble_over_steps;
  int bubble_steps = 0;
  int bubble_runs = 1;  // with --repeats: the counted steps of every run that recorded them, pooled
  // With --repeats: each run's median bubble over its counted steps, and the
  // half-width of the 95% interval of their median (0: fewer than 3 runs).
  std::vector<double> bubble_run_medians;
  double bubble_uncertainty = 0;
  std::vector<Delta> busy_s_per_rank;
  std::vector<OpKindErrors> op_kinds;
  std::optional<MatchedAction> largest_duration_error, largest_start_error;
  // Peak stashed bytes per stage. Each trace gives the value it records:
  // measured.stages[].peak_stash_bytes when it was measured, otherwise the IR's
  // predicted_stash_bytes_per_stage. Empty, with `stash_note` saying which
  // file lacks them, when either records neither.
  std::vector<Delta> stash_bytes_per_stage;
  std::string stash_predicted_source, stash_measured_source, stash_note;
  // What the measured run recorded of its noise (none: an older trace, or
  // not a run's), and the step time's error judged against it.
  std::optional<Noise> noise;
  std::optional<Repeats> repeats;  // compare --repeats: other runs of the measured configuration
  Judgement step_judgement;
  Judgement bubble_judgement;  // bubble_over_steps (or bubble_fraction) against bubble_uncertainty

  nlohmann::json to_json() const;
  std::string to_text() const;
};

// The configuration fields two traces must share, in otherData.
using schedule::configuration_fields;

// The configuration fields of two traces' otherData (`p` read from `pf`, `m`
// from `mf`), checked equal: returns them; throws pipetwin::Error naming the
// file and field where one lacks a field the other has or they differ.
nlohmann::json same_configuration(const nlohmann::json& p, const std::string& pf, const nlohmann::json& m,
                                  const std::string& mf);

// otherData's "producer" ("pipetwin run", "pipetwin simulate"), "" without one.
std::string producer_of(const nlohmann::json& meta);

// Throws pipetwin::Error naming the file and the otherData field where the two
// traces describe different configurations, or the file, rank and action
// where their actions do not match one to one.
Comparison compare(const schedule::Trace& predicted, const std::string& predicted_file,
                   const schedule::Trace& measured, const std::string& measured_file);

// Other runs of the measured configuration (repeats, read from `files`):
// each checked to be a measured run of the same configuration (an error names
// the file and field otherwise), their traced steps and the measured trace's
// make c.repeats (busy repeats beside a quiet measured run left out, counted),
// and the prediction against their median is judged against the wider of the
// measured run's noise and their spread. A file given twice is refused.
// Where every run counted recorded its steps' bubbles, the measured bubble
// becomes the median over all their counted steps (one run's moves by points
// with which cores its ranks had).
void add_repeats(Comparison& c, const schedule::Trace& measured, const std::vector<schedule::Trace>& repeats,
                 const std::vector<std::string>& files);

// That `trace` ran `schedule` (read from `schedule_file` and lowered as
// simulate and run lower it): the same ranks, and on each the same compute
// and optimizer actions in the same order (transfers may be placed
// differently: a PyTorch CSV's receives are waited for at their use).
// Returns the actions checked; throws pipetwin::Error naming the trace, the
// rank and the first action that differs, or a trace that records no program.
int check_ran_schedule(const schedule::Trace& trace, const std::string& trace_file, schedule::Program schedule,
                       const std::string& schedule_file);

}  // namespace pipetwin::calibration
