// calibrate --runs: the device's curve fitted to whole runs and their
// measured (or published) speed, not to traces: what a user of a cluster
// has (a table of step times, a training log).
//
// Fitted, for the hardware every run names: the matrix kernels' efficiency
// curve eff(w) = max · w / (w + half_flops) and the share of the memory
// bandwidth the elementwise kernels achieve (memory_efficiency); the links,
// the collectives and everything else stay the hardware's. Method, least
// squares on the logarithm of time: for each half_flops on a log grid, three
// predictions of each fitted run, at (max, mem) = (1, 1), (1/2, 1), (1, 1/2),
// give its step as c + a / max + g / mem (the matrix work scales as 1/max,
// the elementwise traffic as 1/mem, the rest not); the (max, mem) of least
// squared log error over the fitted runs is found by nested golden-section
// searches, and the (max, half_flops, mem) of least error is kept. Every
// figure reported is a prediction on the fitted hardware itself; each fitted
// run's leave-one-out error comes from the same decomposition, fitted on the
// other fitted runs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibration/runs.hpp"
#include "models/hardware.hpp"
#include "models/model.hpp"
#include "twin/engine.hpp"

namespace pipetwin::twin {

struct RunsFitRequest {
  std::vector<calibration::MeasuredRun> runs;
  // The runs fitted, by name; empty: those whose role is fit. The others are predicted.
  std::vector<std::string> fit;
  Engine engine = Engine::Auto;
  int jobs = 0;  // SimGrid replays at once; 0: the cores
  // Also fit one factor on the hardware's fused attention kernel's rates
  // (Device::attention, which the hardware must give): a fourth prediction
  // per run and half_flops, at half the rates, gives its time as q / att.
  bool fit_attention = false;
};

struct RunOutcome {
  std::string name;
  bool fitted = false;
  double measured_s = 0, predicted_s = 0;  // seconds per step
  // TFLOP/s per GPU by the run's formula, where it was given in those units.
  double measured_tflops = 0, predicted_tflops = 0;
  double error = 0;           // predicted / measured − 1, in the run's units (TFLOP/s or seconds)
  double loo_error = 0;       // fitted runs: the error with the run left out of the fit
  std::string engine, note;   // the engine that answered; "out of memory" where the twin says so
};

struct RunsFit {
  double max = 0, half_flops = 0, memory_efficiency = 0;
  double attention_scale = 0;  // with fit_attention: the factor on the attention rates; else 0
  models::Hardware hardware;  // the runs' hardware with the fitted curve (and rates)
  std::vector<RunOutcome> runs;
  double median_error = 0, worst_error = 0;          // |error| over the predicted runs
  double median_loo_error = 0, worst_loo_error = 0;  // |leave-one-out error| over the fitted runs
  double rms_log_residual = 0;                       // over the fitted runs
  int predictions = 0;                               // simulations made
};

// The runs of every file (calibration::read_runs: a CSV, or a Megatron-LM
// log run on `hardware`), in order.
std::vector<calibration::MeasuredRun> read_run_files(const std::vector<std::string>& paths, const std::string& hardware);
// torchtitan runs: (job TOML, training log) pairs, flattened, of `model` (a
// spec file: a flavor's shape is not in the TOML) on `hardware`.
std::vector<calibration::MeasuredRun> read_torchtitan_files(const std::vector<std::string>& toml_and_log,
                                                            const std::string& model, const std::string& hardware);

// The runs of `files` (read_run_files), then those of the torchtitan pairs
// (read_torchtitan_files): what calibrate --runs and --torchtitan give.
std::vector<calibration::MeasuredRun> read_all_runs(const std::vector<std::string>& files,
                                                    const std::vector<std::string>& torchtitan, const std::string& model,
                                                    const std::string& hardware);

// Throws pipetwin::Error naming the run (its file and line) at fault.
RunsFit calibrate_runs(const RunsFitRequest& request);

// FLOPs of one step of `run` by its formula (its model loaded, or given).
double run_flops(const calibration::MeasuredRun& run);
double run_flops(const calibration::MeasuredRun& run, const models::Model& model);

nlohmann::json runs_fit_json(const RunsFit& fit);
std::string runs_fit_text(const RunsFit& fit);

}  // namespace pipetwin::twin
