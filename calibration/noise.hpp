// How much a measured run can say about the model: the noise `pipetwin run`
// recorded with it (otherData.measured.noise: the steps' spread and what else
// used the host's CPUs, exec/host_load.hpp), and the judgement of an error
// against it. An error is one of
//   not meaningful  other processes or the hypervisor took at least
//                   kBusyShare of the host's CPU time during the counted
//                   steps: the measurement is of the machine's load as much
//                   as of the configuration,
//   within noise    |error| no larger than the uncertainty of the measured
//                   median step (its 95% interval from the steps' spread)
//                   and what the load measured beside it may have added,
//   model error     larger than that on a quiet machine,
//   unknown         the trace recorded no noise (an older trace, or one from
//                   elsewhere).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace pipetwin::calibration {

// Measured on a 2-core machine by scripts/bench_noise.py (docs/calibration.md,
// "Noise"): 1f1b K=2 M=8 on transformer-small, 9 steps, beside a process busy
// a set share of every 20 ms. Quiet runs record 0.0% of the CPU as others';
// others at 3-12% slowed the median step by 12-27%, a CPU-bound loop (46%)
// by 80%; over the loaded runs the slowdown was a median 2.5 times the share
// (others preempt ranks on the pipeline's critical path). So a run is busy
// from 3% on (beyond the counters' resolution), and below that an error is
// judged within noise up to the median's own uncertainty plus
// kLoadSensitivity times the share taken.
inline constexpr double kBusyShare = 0.03;
inline constexpr double kLoadSensitivity = 2.5;

struct Noise {
  double other_share = 0, steal_share = 0;  // of the busiest host's CPU time
  double share_resolution = 0;              // how finely the kernel's ticks tell them
  double median_uncertainty_rel = 0;        // 0: fewer than 3 counted steps
  double step_median_s = 0, step_mad_s = 0;
  int counted_steps = 0;
  double load1_start = 0, load1_end = 0;    // of the busiest host
  double mhz_min = 0, mhz_max = 0;
  double faults_per_step = 0;               // the ranks' page faults per counted step, the most of any host
  // The ranks' compute actions' own CPU time per step: its median over the
  // counted steps and their spread (MAD / median); 0 where the run did not
  // measure it (exec/host_load.hpp: the host's pace, which no counter shows).
  double compute_cpu_s = 0, compute_cpu_spread = 0;
  // False where the run recorded its steps' spread but not the host's load
  // (a torch.profiler run): the shares above are then unknown, not 0.
  bool host_known = true;
  // From a run's otherData (the measured trace's metadata); nullopt when it has no noise record.
  static std::optional<Noise> of_trace(const nlohmann::json& meta);
  // From the noise record itself (otherData.measured.noise, `pipetwin run`'s measured.noise).
  static Noise from_json(const nlohmann::json& noise);
  // Busy when, even at the low end of what the ticks allow, others took kBusyShare.
  bool busy() const { return other_share + steal_share - share_resolution >= kBusyShare; }
  // The relative error the measurement alone may carry: the median's
  // uncertainty and what the others' share may have slowed.
  double band() const { return median_uncertainty_rel + kLoadSensitivity * (other_share + steal_share); }
  double spread() const { return step_median_s > 0 ? step_mad_s / step_median_s : 0; }  // MAD / median
  std::string describe() const;  // one line
};

// Repeats of one measurement: other runs of the same configuration (`pipetwin
// compare --repeats`), each by its traced step; compare then holds the
// prediction against their median. A machine's pace drifts from
// run to run by more than a run's own steps show (2-core machine, 60
// configurations run 3 to 6 times, docs/calibration.md "Noise"): their
// spread bounds the measurement where one run's steps cannot.
struct Repeats {
  std::vector<std::string> files;  // every run given, the measured trace's first
  std::vector<double> steps_s;     // the traced step of each run counted, the measured one's first
  // Each counted run's compute CPU time per step (Noise::compute_cpu_s), in
  // the same order; empty unless every one of them measured it.
  std::vector<double> compute_cpu_s;
  int busy = 0;                    // repeats measured on a busy machine, left out (beside a quiet measured run)
  double median_s = 0, mad_s = 0;
  // The 95% interval of the median over the runs (Student's t, n - 1 degrees
  // of freedom), relative; 0: fewer than 3 runs, or no spread.
  double median_uncertainty_rel = 0;
  static Repeats of(std::vector<std::string> files, std::vector<double> steps_s, int busy,
                    std::vector<double> compute_cpu_s = {});
  std::string describe() const;  // one line
};

// What a calibration cannot explain. Runs of one configuration get one
// prediction, so their step errors' spread about their configuration's mean
// is the measurement's noise, which no fit removes: the noise floor. The
// configurations' mean errors are the model's part, plus that noise over the
// square root of their runs.
struct NoiseFloor {
  int configurations = 0;      // measured two or more times
  int runs = 0;                // in those
  double run_sd_rel = 0;       // pooled sd of a run's relative error about its configuration's mean
  int all_configurations = 0;  // every configuration, once or more
  double mean_error_rms_rel = 0, mean_error_worst_rel = 0;  // of the configurations' mean errors
  double typical_runs = 0;     // the median runs per configuration
  std::string describe() const;  // one line; "" without a configuration measured twice
};
// `configurations[i]` names run i's configuration, `relative_errors[i]` its
// step error (predicted / measured - 1).
NoiseFloor noise_floor(const std::vector<std::string>& configurations, const std::vector<double>& relative_errors);

enum class Verdict { Unknown, NotMeaningful, WithinNoise, ModelError };
std::string verdict_name(Verdict v);  // "unknown", "not meaningful", "within noise", "model error"

struct Judgement {
  Verdict verdict = Verdict::Unknown;
  std::string why;
};

// The step time's relative error (predicted - measured) / measured against the
// measured run's noise and, where given, its repeats' spread (the wider band).
Judgement judge(std::optional<double> relative_error, const std::optional<Noise>& noise,
                const std::optional<Repeats>& repeats = std::nullopt);

// The bubble's error (predicted - measured, as a fraction) against the
// spread of the bubble from run to run: `band` the half-width of the 95%
// interval of its median over `runs` runs (compare --repeats). One run's
// bubble moves by points with where the kernel put its ranks, which its own
// steps do not show: with fewer than 3 runs the verdict is unknown.
Judgement judge_bubble(double error, const std::optional<Noise>& noise, double band, int runs);

}  // namespace pipetwin::calibration
