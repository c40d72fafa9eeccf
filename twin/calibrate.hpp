// The calibration loop around calibration/'s fit: a traced configuration
// replayed on a hardware (its own Program and partition, no name rebuilt),
// the sharing of cores fitted through such replays, and every traced
// configuration replayed on the result.
//
//   traces --fit--> device, links --fit_sharing(replay)--> cores --replay--> predicted steps
#pragma once

#include <string>
#include <vector>

#include "calibration/fit.hpp"
#include "calibration/traces.hpp"
#include "twin/microbench.hpp"
#include "twin/predict.hpp"

namespace pipetwin::twin {

// One traced configuration predicted on `hardware`.
Prediction replay(const calibration::TraceRun& run, const models::Hardware& hardware, Engine engine);

struct Calibrated {
  calibration::FitResult fit;
  std::vector<double> predicted_step_s;  // per run, on the calibrated hardware
  std::vector<Engine> engines;           // per run, the engine that answered
  std::string yaml;                      // the calibrated hardware file, known to read back
};

// Fits `runs` (checked together) starting from `base`. `out` names the file
// the YAML is for (its header says how to use it). Throws pipetwin::Error
// when the fitted hardware would not read back.
Calibrated calibrate(const std::vector<calibration::TraceRun>& runs, const models::Hardware& base, Engine engine,
                     const std::string& out);

// The report of a calibration of `runs` (load_calibration_runs) from `base`.
nlohmann::json calibration_json(const CalibrateRequest& request, const std::vector<calibration::TraceRun>& runs,
                                const Calibrated& calibrated);
std::string calibration_text(const CalibrateRequest& request, const std::vector<calibration::TraceRun>& runs,
                             const models::Hardware& base, const Calibrated& calibrated);

}  // namespace pipetwin::twin
