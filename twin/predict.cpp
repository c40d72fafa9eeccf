// predict: the engine choice, then the engine.
#include "twin/predict.hpp"

#include "sim/simulator.hpp"
#include "sim/transfer_probe.hpp"

namespace pipetwin::twin {

Prediction predict(const Scenario& sc, Engine engine) {
  auto choice = choose_engine(sc, engine);
  if (choice.engine == Engine::Fast) return {std::move(choice.timeline), Engine::Fast, std::move(choice.why)};
  return {sim::simulate(simgrid_input(sc, choice)).timeline, Engine::SimGrid, std::move(choice.why)};
}

models::RunSummary summarize(const Scenario& sc, const Prediction& p) {
  const std::string engine = p.engine == Engine::SimGrid ? "simgrid " + simgrid_version() : "fast critical path";
  return models::summarize(p.timeline, sc.samples, *sc.costs, sc.program.partition, engine, &sc.program);
}

std::string simgrid_version() { return sim::simgrid_version(); }

}  // namespace pipetwin::twin
