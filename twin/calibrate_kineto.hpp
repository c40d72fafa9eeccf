// calibrate from torch.profiler traces: PyTorch's own pipelining runs of the
// user's model (calibration/kineto.hpp) fitted into a cost table, and every
// run, fitted or held out, replayed on it: its own order of actions, timed
// by the evaluator, against its measured steps.
//
//   pipetwin calibrate RUN_DIR... --out costs.yaml [--batch B] [--held-out RUN_DIR...]
//   pipetwin simulate --costs costs.yaml -s interleaved -k 2 -v 2 -m 8 [--batch B]
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibration/kineto.hpp"
#include "twin/own_costs.hpp"

namespace pipetwin::twin {

struct KinetoRunCheck {
  std::string path, describe;
  bool fitted = false;
  std::vector<double> steps_s;   // each measured step
  double median_s = 0, min_s = 0, max_s = 0;
  double predicted_s = 0;
  double error() const { return median_s > 0 ? predicted_s / median_s - 1 : 0; }
  // The steps' own spread about their median: (max - min) / 2 / median.
  double spread() const { return median_s > 0 ? (max_s - min_s) / 2 / median_s : 0; }
  bool within_spread() const { return predicted_s >= min_s && predicted_s <= max_s; }
};

struct KinetoCalibration {
  calibration::KinetoFit fit;
  std::vector<KinetoRunCheck> runs;
  std::string yaml;  // the cost table, with a header naming what it was fitted on
};

// The run's own compute order on `table`, moved to the run's micro-batch
// size where it is known: what its replay and compare --costs time.
std::unique_ptr<CostsScenario> kineto_scenario(const calibration::KinetoRun& run, const models::CostTable& table);

// The measured run replayed on `table`: the run's own compute order, lowered
// as simulate lowers it, on the evaluator.
KinetoRunCheck check_kineto_run(const calibration::KinetoRun& run, const models::CostTable& table, bool fitted);

// `batch`: the samples of every run's step (0: not known; the runs must
// then share one M). Throws pipetwin::Error naming the run (folder or file)
// at fault.
KinetoCalibration calibrate_kineto(const std::vector<std::string>& fit, const std::vector<std::string>& held_out,
                                   int batch = 0);

std::string kineto_calibration_text(const KinetoCalibration& c);
nlohmann::json kineto_calibration_json(const KinetoCalibration& c);

}  // namespace pipetwin::twin
