// calibrate: fit, fit_sharing through replays, replays on the result.
#include "twin/calibrate.hpp"

#include "models/hardware.hpp"
#include "models/summary.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"

namespace pipetwin::twin {

Prediction replay(const calibration::TraceRun& run, const models::Hardware& hardware, Engine engine) {
  const auto sc =
      scenario_of(run.model, hardware, run.program, run.microbatch_size, run.batch, run.optimizer, run.collective);
  return predict(*sc, engine);
}

Calibrated calibrate(const std::vector<calibration::TraceRun>& runs, const models::Hardware& base, Engine engine,
                     const std::string& out) {
  Calibrated c;
  // The device from the pipeline runs' actions, then how the ranks share the
  // host's cores from their step times, replayed; then the collectives from
  // the data-parallel runs (a replica's trace does not show the other
  // replicas computing beside it, so their actions do not fit the device).
  std::vector<calibration::TraceRun> pipelines;
  for (const auto& r : runs) {
    if (r.program.is_pipeline_only()) pipelines.push_back(r);
  }
  if (pipelines.empty()) {
    throw Error("calibrate: every trace given is tensor- or data-parallel (T or D > 1); the device is fitted on "
                "pipeline runs (T = D = 1): give at least one (pipetwin run without -t and -d), or add --microbench");
  }
  const calibration::Replay replayed = [&](const calibration::TraceRun& r, const models::Hardware& hw) {
    return replay(r, hw, engine).timeline;
  };
  c.fit = calibration::fit(pipelines, base);
  calibration::fit_sharing(pipelines, c.fit, replayed);
  const calibration::TensorShare tensor_share = [](const calibration::TraceRun& r, const models::Hardware& hw) {
    const auto sc = scenario_of(r.model, hw, r.program, r.microbatch_size, r.batch, r.optimizer, r.collective);
    return models::tp_collective_per_rank(sc->program, *sc->costs);
  };
  calibration::fit_collectives(runs, c.fit, replayed, tensor_share);
  std::vector<std::string> engines;
  for (const auto& r : runs) {
    const auto p = replay(r, c.fit.hardware, engine);
    c.predicted_step_s.push_back(p.timeline.makespan());
    c.engines.push_back(p.engine);
    engines.emplace_back(engine_name(p.engine));
  }
  const std::string header =
      "Calibrated by pipetwin calibrate from " + std::to_string(runs.size()) + " trace(s) of " + runs.front().model.name +
      ", starting from " + base.name + ".\nUse it like a preset: pipetwin simulate --hardware " + out +
      " ...\nPer layer kind, time = max-efficiency curve of its work (FLOPs x micro-batch size); see calibration: below.";
  c.yaml = models::hardware_to_yaml(c.fit.hardware, header,
                                    calibration::calibration_yaml(c.fit, runs, c.predicted_step_s, engines));
  // The file must read back as simulate will read it: a fit gone wrong (a
  // number that is not finite) is an error here, not a file that fails later.
  try {
    models::hardware_from_yaml(models::YamlFields(models::parse_yaml(c.yaml, out), out));
  } catch (const Error& e) {
    throw Error(std::string("calibrate: the fitted hardware does not read back, so it was not written: ") + e.what());
  }
  return c;
}

}  // namespace pipetwin::twin
