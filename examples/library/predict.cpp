// predict: one configuration's step through the twin library, then a small
// sweep over M streamed row by row; no command line of pipetwin's involved.
//   predict MODEL HARDWARE SCHEDULE K M
#include <cstdio>
#include <cstdlib>
#include <string>

#include "twin/pipetwin.hpp"

int main(int argc, char** argv) {
  namespace pt = pipetwin::twin;
  if (argc != 6) {
    std::fprintf(stderr, "usage: predict MODEL HARDWARE SCHEDULE K M\n");
    return 2;
  }
  try {
    pt::ScenarioSpec spec;
    spec.model = argv[1];
    spec.hardware = argv[2];
    spec.schedule = argv[3];
    spec.ranks = std::atoi(argv[4]);
    spec.microbatches = std::atoi(argv[5]);
    const auto scenario = pt::build_scenario(spec);
    const auto prediction = pt::predict(*scenario, pt::Engine::Auto);
    const auto summary = pt::summarize(*scenario, prediction);
    std::printf("pipetwin %s\n", std::string(pt::library_version()).c_str());
    std::printf("step_time_s %.9g\nbubble %.9g\nengine %s\n", summary.step_time_s, summary.bubble,
                std::string(pt::engine_name(prediction.engine)).c_str());
    pt::SweepSpec sweep;
    sweep.model = spec.model;
    sweep.hardware = spec.hardware;
    sweep.schedules = {spec.schedule};
    sweep.ranks = {spec.ranks};
    sweep.microbatches = {spec.microbatches, 2 * spec.microbatches};
    sweep.out = "sweep.csv";
    int rows = 0;
    pt::run_sweep(sweep, {}, [&](const pt::SweepRow& row) {
      ++rows;
      std::printf("row M=%d %s %.9g\n", row.microbatches, row.status.c_str(), row.step_time_s);
    });
    std::printf("rows %d\n", rows);
  } catch (const pipetwin::Error& e) {
    std::fprintf(stderr, "predict: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
