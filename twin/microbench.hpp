// The runs `pipetwin calibrate` fits: the traces given, checked together,
// and the short configurations of --microbench, run for real by the executor
// (pipetwin-exec run ...) and traced.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "calibration/traces.hpp"
#include "twin/engine.hpp"

namespace pipetwin::twin {

// What `pipetwin calibrate` is asked.
struct CalibrateRequest {
  std::vector<std::string> traces;  // measured traces (pipetwin run --trace)
  std::string hardware = "cpu";     // the base hardware the fit starts from: preset or file
  std::string out;                  // the calibrated hardware file (recorded in it; the caller writes it)
  std::string model;                // --microbench's model spec ("": the traces')
  std::string microbench_dir;       // where --microbench writes its traces ("": OUT.microbench)
  Engine engine = Engine::Auto;     // of the replays
  bool microbench = false;
  int threads = 0, steps = 6, microbench_repeats = 1;  // --microbench's runs; threads 0: the traces'
};

// Told of each --microbench run as it starts: "3/14  k1_mb16".
using MicrobenchProgress = std::function<void(const std::string& line)>;

// Something to fit, and file names the calibrated YAML (UTF-8 only) can
// record; then the traces given, checked together, and those of the
// --microbench runs. Throws pipetwin::Error naming the file or run at fault.
std::vector<calibration::TraceRun> load_calibration_runs(const CalibrateRequest& request,
                                                         const MicrobenchProgress& progress = {});

}  // namespace pipetwin::twin
