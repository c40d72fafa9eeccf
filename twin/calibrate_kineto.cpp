// calibrate_kineto: torch.profiler runs fitted into a cost table, and every
// run replayed on it.
#include "twin/calibrate_kineto.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"
#include "twin/own_costs.hpp"

namespace pipetwin::twin {
namespace ps = pipetwin::schedule;

std::unique_ptr<CostsScenario> kineto_scenario(const calibration::KinetoRun& run, const models::CostTable& table) {
  return costs_scenario(run.program, run.samples_per_microbatch > 0 ? table.at_samples(run.samples_per_microbatch) : table);
}

KinetoRunCheck check_kineto_run(const calibration::KinetoRun& run, const models::CostTable& table, bool fitted) {
  KinetoRunCheck c;
  c.path = run.path;
  c.describe = run.describe();
  c.fitted = fitted;
  c.steps_s = run.step_times_s;
  c.median_s = ps::median(c.steps_s);
  c.min_s = *std::min_element(c.steps_s.begin(), c.steps_s.end());
  c.max_s = *std::max_element(c.steps_s.begin(), c.steps_s.end());
  try {
    c.predicted_s = predict(*kineto_scenario(run, table), Engine::Fast).timeline.makespan();
  } catch (const Error& e) {
    throw Error(run.path + ": replaying it on the fitted costs: " + e.what());
  }
  return c;
}

KinetoCalibration calibrate_kineto(const std::vector<std::string>& fit, const std::vector<std::string>& held_out,
                                   int batch) {
  if (fit.empty()) throw Error("calibrate: no torch.profiler run to fit (a folder of one trace per rank)");
  std::vector<calibration::KinetoRun> fitted, others;
  for (const auto& p : fit) fitted.push_back(calibration::read_kineto_run(p, batch));
  for (const auto& p : held_out) others.push_back(calibration::read_kineto_run(p, batch));
  KinetoCalibration c;
  c.fit = calibration::fit_kineto(fitted);
  std::string header = "# Fitted by pipetwin calibrate from torch.profiler traces of:\n";
  for (const auto& r : fitted) header += "#   " + r.path + " (" + r.describe() + ")\n";
  header += "# Seconds per micro-batch: the mean cost each stage's actions took their rank (a step is their sum).\n";
  c.yaml = models::cost_table_to_yaml(c.fit.table, header);
  // The table as it will be read back: the replays below use what the file says.
  const auto table = models::parse_cost_table(c.yaml, "the fitted cost table");
  for (const auto& r : fitted) c.runs.push_back(check_kineto_run(r, table, true));
  for (const auto& r : others) {
    if (r.program.num_stages() != fitted.front().program.num_stages()) {
      throw Error(r.path + ": " + std::to_string(r.program.num_stages()) + " stages, but the fitted runs have " +
                  std::to_string(fitted.front().program.num_stages()) + ": a cost table predicts the same stages");
    }
    c.runs.push_back(check_kineto_run(r, table, false));
  }
  return c;
}

namespace {

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", s * 1e3);
  return b;
}

}  // namespace

std::string kineto_calibration_text(const KinetoCalibration& c) {
  std::string out = "fitted cost table (per micro-batch, ms):\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-6s %8s %8s %8s %8s %8s %8s %8s %9s  %s\n", "stage", "F", "B", "I", "W", "send", "recv",
                "step", "flight", "samples F/B/I/W");
  out += line;
  const auto& t = c.fit.table;
  for (std::size_t s = 0; s < t.stages.size(); ++s) {
    const auto& r = t.stages[s];
    const auto& n = c.fit.samples[s];
    std::snprintf(line, sizeof line, "  %-6zu %8s %8s %8s %8s %8s %8s %8s %9s  %d/%d/%d/%d\n", s, ms(r.forward_s).c_str(),
                  ms(r.backward_s).c_str(), r.split ? ms(r.input_grad_s).c_str() : "-",
                  r.split ? ms(r.weight_grad_s).c_str() : "-", ms(r.send_s).c_str(), ms(r.recv_s).c_str(),
                  ms(r.step_s).c_str(), r.output_transfer_s ? ms(*r.output_transfer_s).c_str() : "-", n.forwards,
                  n.backwards, n.input_grads, n.weight_grads);
    out += line;
  }
  for (const auto& n : c.fit.notes) out += "  note: " + n + "\n";
  out += "runs replayed on it (step, ms; measured: median [min, max] of the profiled steps):\n";
  std::vector<double> held;
  for (const auto& r : c.runs) {
    std::snprintf(line, sizeof line, "  %-9s %-40s measured %s [%s, %s]  predicted %s  error %+.1f%% (%s)\n",
                  r.fitted ? "fitted" : "held out", r.path.c_str(), ms(r.median_s).c_str(), ms(r.min_s).c_str(),
                  ms(r.max_s).c_str(), ms(r.predicted_s).c_str(), 100 * r.error(),
                  r.within_spread() ? "within the steps' spread" : "outside the steps' spread");
    out += line;
    if (!r.fitted) held.push_back(std::fabs(r.error()));
  }
  if (!held.empty()) {
    std::snprintf(line, sizeof line, "held out: %zu runs, |error| median %.1f%%, worst %.1f%%\n", held.size(),
                  100 * ps::median(held), 100 * *std::max_element(held.begin(), held.end()));
    out += line;
  }
  return out;
}

nlohmann::json kineto_calibration_json(const KinetoCalibration& c) {
  nlohmann::json j;
  j["notes"] = c.fit.notes;
  j["cost_table"] = c.yaml;
  for (const auto& r : c.runs) {
    j["runs"].push_back({{"path", r.path},
                         {"describe", r.describe},
                         {"fitted", r.fitted},
                         {"steps_s", r.steps_s},
                         {"measured_median_s", r.median_s},
                         {"measured_min_s", r.min_s},
                         {"measured_max_s", r.max_s},
                         {"predicted_s", r.predicted_s},
                         {"error", r.error()},
                         {"within_spread", r.within_spread()}});
  }
  for (std::size_t s = 0; s < c.fit.samples.size(); ++s) {
    const auto& n = c.fit.samples[s];
    j["samples"].push_back({{"stage", s},
                            {"forwards", n.forwards},
                            {"backwards", n.backwards},
                            {"input_grads", n.input_grads},
                            {"weight_grads", n.weight_grads},
                            {"sends", n.sends},
                            {"receives", n.receives},
                            {"flights", n.flights}});
  }
  return j;
}

}  // namespace pipetwin::twin
