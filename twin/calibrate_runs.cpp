// calibrate_runs: the device's curve fitted to whole runs (calibrate_runs.hpp).
#include "twin/calibrate_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "models/families.hpp"
#include "models/layer_graph.hpp"
#include "models/summary.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"
#include "twin/scenario.hpp"
#include "twin/simgrid_pool.hpp"

namespace pipetwin::twin {

namespace {

using calibration::FlopsFormula;
using calibration::MeasuredRun;

// The half_flops tried: the curve's knee, from small kernels' work to large ones'.
const std::vector<double> kHalfGrid{1e8, 1e9, 3.16227766e9, 1e10, 3.16227766e10, 1e11, 3.16227766e11, 1e12};

models::Model load_run_model(const MeasuredRun& r) {
  const auto m = r.model_text.empty() ? models::load_model(r.model) : models::model_from_text(r.model_text, r.source, r.name);
  return models::in_topological_order(m);
}

ScenarioSpec spec_of(const MeasuredRun& r) {
  ScenarioSpec s;
  s.model = r.model;
  s.hardware = r.hardware;
  s.schedule = r.schedule;
  s.ranks = r.pipeline;
  s.virtual_stages = r.virtual_stages;
  s.microbatches = r.microbatches;
  s.batch = r.global_batch;
  s.recompute = r.recompute;
  s.tensor_parallel = r.tensor;
  s.data_parallel = r.data;
  s.sequence_parallel = r.sequence_parallel;
  s.zero = r.zero;
  s.shard_group = r.shard_group;
  s.reshard_after_forward = r.reshard_after_forward;
  s.precision = r.precision;
  s.context_parallel = r.context;
  s.expert_parallel = r.expert;
  s.expert_tensor_parallel = r.expert_tensor;
  s.partition = r.partition;
  return s;
}

// The hardware with a curve (max, half) and an elementwise share mem.
// With --fit-attention, the fused attention kernel's rates times `att` too.
models::Hardware with_curve(models::Hardware hw, double max, double half, double mem, double att = 1) {
  hw.device.efficiency = models::Efficiency{max, half, {}};
  hw.device.memory_efficiency = mem;
  auto& a = hw.device.attention;
  for (auto* curve : {&a.forward, &a.forward_causal, &a.backward, &a.backward_causal}) {
    for (auto& point : *curve) point.second *= att;
  }
  return hw;
}

struct Outcome {
  double step_s = 0;
  bool fits = true;
  std::string engine, error;
};

// One prediction to make: run `run` on `hardware`.
struct Job {
  std::size_t run;
  models::Hardware hardware;
};

// What stays of a run from one prediction to the next: its model, and its
// Program partitioned once (as its framework split it, or the twin's
// partition on the base hardware), so that only the device's curve varies.
struct Prepared {
  models::Model model;
  schedule::Program program;
  models::PartitionRequest request;
  double samples = 0;
};

std::unique_ptr<Scenario> scenario_for(const Prepared& p, const models::Hardware& hw) {
  return scenario_of(p.model, hw, p.program, p.request.microbatch_size, p.samples, p.request.optimizer,
                     p.request.collective, p.request.checkpoint);
}

// Every job's step, `jobs` SimGrid replays at once; the fast path's answers in this thread.
std::vector<Outcome> predict_all(const std::vector<MeasuredRun>& runs, const std::vector<Prepared>& prepared,
                                 const std::vector<Job>& todo, Engine engine, int jobs) {
  std::vector<Outcome> out(todo.size());
  std::map<std::size_t, std::unique_ptr<Scenario>> held;  // those in SimGrid, until their replay ends
  SimGridPool pool(jobs);
  for (std::size_t i = 0; i < todo.size(); ++i) {
    pool.add(i, [&, i]() -> std::optional<sim::SimInput> {
      const Job& job = todo[i];
      const MeasuredRun& r = runs[job.run];
      try {
        auto sc = scenario_for(prepared[job.run], job.hardware);
        auto choice = choose_engine(*sc, engine);
        if (choice.engine == Engine::Fast) {
          const auto s = models::summarize(choice.timeline, sc->samples, *sc->costs, sc->program.partition, "fast", &sc->program);
          out[i] = {s.step_time_s, s.fits(), "fast", ""};
          return std::nullopt;
        }
        auto input = simgrid_input(*sc, choice);
        held[i] = std::move(sc);
        return input;
      } catch (const Error& e) {
        out[i].error = r.source + " (" + r.name + "): " + e.what();
        return std::nullopt;
      }
    });
  }
  pool.run([&](std::size_t i, const sim::SimResult* result, const std::string& error) {
    if (result == nullptr) {
      out[i].error = runs[todo[i].run].source + " (" + runs[todo[i].run].name + "): " + error;
    } else {
      const Scenario& sc = *held.at(i);
      const auto s = models::summarize(result->timeline, sc.samples, *sc.costs, sc.program.partition, "simgrid", &sc.program);
      out[i] = {s.step_time_s, s.fits(), "simgrid", ""};
    }
    held.erase(i);
  });
  return out;
}

// A fitted run's step at one half_flops: c + a / max + g / mem (+ q / att:
// the attention kernel's time, where its rates are fitted too).
struct Line {
  std::size_t run;
  double c, a, g, q = 0;
  double at(double max, double mem, double att = 1) const { return c + a / max + g / mem + q / att; }
};

double golden(const std::function<double(double)>& f, double lo = 0.05, double hi = 1.0) {
  for (int k = 0; k < 60; ++k) {  // the error has one minimum along each axis
    const double m1 = lo + (hi - lo) * 0.381966, m2 = lo + (hi - lo) * 0.618034;
    if (f(m1) < f(m2)) {
      hi = m2;
    } else {
      lo = m1;
    }
  }
  return (lo + hi) / 2;
}

struct Point {
  double error = 0, max = 1, half = 0, mem = 1, att = 1;
};

// The (max, mem) of least squared log error over `lines` (measured[run]
// seconds), and with `attention` the attention rates' factor att too.
Point best_on(const std::vector<Line>& lines, const std::vector<double>& measured, double half, bool attention) {
  const auto err = [&](double max, double mem, double att) {
    double e = 0;
    for (const auto& l : lines) e += std::pow(std::log(l.at(max, mem, att) / measured[l.run]), 2);
    return e;
  };
  const auto at_att = [&](double att) {
    const auto best_mem = [&](double max) { return golden([&](double mem) { return err(max, mem, att); }); };
    const double max = golden([&](double x) { return err(x, best_mem(x), att); });
    const double mem = best_mem(max);
    return Point{err(max, mem, att), max, half, mem, att};
  };
  if (!attention) return at_att(1);
  return at_att(golden([&](double att) { return at_att(att).error; }, 0.1, 2.0));
}

}  // namespace

std::vector<MeasuredRun> read_run_files(const std::vector<std::string>& paths, const std::string& hardware) {
  std::vector<MeasuredRun> runs;
  for (const auto& path : paths) {
    auto some = calibration::read_runs(path, hardware);
    runs.insert(runs.end(), some.begin(), some.end());
  }
  return runs;
}

std::vector<MeasuredRun> read_torchtitan_files(const std::vector<std::string>& toml_and_log, const std::string& model,
                                               const std::string& hardware) {
  if (toml_and_log.empty()) return {};
  if (toml_and_log.size() % 2 != 0) throw Error("--torchtitan takes a job TOML and its training log, in pairs");
  if (model.empty()) throw Error("--torchtitan needs --model: the spec of the flavor the run trained");
  if (hardware.empty()) throw Error("--torchtitan needs --hardware: what the run ran on");
  std::vector<MeasuredRun> runs;
  for (std::size_t i = 0; i < toml_and_log.size(); i += 2) {
    runs.push_back(calibration::read_torchtitan_run(toml_and_log[i], toml_and_log[i + 1], model, hardware));
  }
  return runs;
}

std::vector<MeasuredRun> read_all_runs(const std::vector<std::string>& files, const std::vector<std::string>& torchtitan,
                                       const std::string& model, const std::string& hardware) {
  auto runs = read_run_files(files, hardware);
  const auto titan = read_torchtitan_files(torchtitan, model, hardware);
  runs.insert(runs.end(), titan.begin(), titan.end());
  return runs;
}

double run_flops(const MeasuredRun& r) { return run_flops(r, load_run_model(r)); }

double run_flops(const MeasuredRun& r, const models::Model& model) {
  double per_sample = 0;
  for (const auto& l : model.layers) {
    const double f = l.cost.forward_flops;
    switch (l.kind) {
      case models::LayerKind::DecoderBlock:
      case models::LayerKind::MoeBlock:
      case models::LayerKind::TransformerBlock:
        // Forward and backward (twice the forward); Megatron's Appendix adds a recompute's forward.
        per_sample += f * (r.formula == FlopsFormula::Megatron ? 4 : 3);
        break;
      case models::LayerKind::LlmHead:
      case models::LayerKind::LmHead: per_sample += 3 * f; break;  // never recomputed
      default: break;                                               // the embedding: a lookup
    }
  }
  return per_sample * r.global_batch;
}

namespace {

// Which runs are fitted: those --fit names, else those whose role is fit.
std::vector<bool> fitted_runs(const RunsFitRequest& q) {
  const auto& runs = q.runs;
  std::vector<bool> fitted(runs.size(), false);
  for (const auto& name : q.fit) {
    const auto it = std::find_if(runs.begin(), runs.end(), [&](const MeasuredRun& r) { return r.name == name; });
    if (it == runs.end()) {
      std::string names;
      for (const auto& r : runs) names += (names.empty() ? "" : ", ") + r.name;
      throw Error("--fit names run '" + name + "', which is not among the runs (" + names + ")");
    }
    fitted[it - runs.begin()] = true;
  }
  if (q.fit.empty()) {
    for (std::size_t i = 0; i < runs.size(); ++i) fitted[i] = runs[i].role == "fit";
  }
  if (std::none_of(fitted.begin(), fitted.end(), [](bool f) { return f; })) {
    throw Error("calibrate --runs: no run is fitted: name them with --fit, or give them role 'fit' in the runs file");
  }
  return fitted;
}

// The one hardware every run names, whose device's curve is fitted.
models::Hardware base_hardware(const std::vector<MeasuredRun>& runs) {
  for (const auto& r : runs) {
    if (r.hardware != runs.front().hardware) {
      throw Error(r.source + ": run '" + r.name + "' names hardware " + r.hardware + ", run '" + runs.front().name +
                  "' " + runs.front().hardware + ": calibrate --runs fits one hardware's device; give each its own file");
    }
  }
  const models::Hardware base = models::load_hardware(runs.front().hardware);
  if (!base.devices.empty()) throw Error(runs.front().hardware + ": lists its devices one by one; --runs fits one device");
  if (!base.device.kinds.empty()) {
    throw Error(runs.front().hardware + ": has calibrated per-kind curves, which would hide the device's curve that --runs "
                "fits; start from the preset it was calibrated from");
  }
  return base;
}

// Per half_flops of the grid where every prediction succeeded: each fitted
// run's line c + a / max + g / mem, from three predictions.
struct Grid {
  std::vector<std::vector<Line>> lines;
  std::vector<double> halves;
  int predictions = 0;
  const std::vector<Line>& at(double half) const {
    return lines[std::find(halves.begin(), halves.end(), half) - halves.begin()];
  }
};

Grid predict_grid(const RunsFitRequest& q, const std::vector<bool>& fitted, const std::vector<Prepared>& prepared,
                  const models::Hardware& base, int jobs) {
  std::vector<Job> todo;
  for (const double half : kHalfGrid) {
    for (std::size_t i = 0; i < q.runs.size(); ++i) {
      if (!fitted[i]) continue;
      for (const auto& [mx, mem] : {std::pair{1.0, 1.0}, std::pair{0.5, 1.0}, std::pair{1.0, 0.5}}) {
        todo.push_back({i, with_curve(base, mx, half, mem)});
      }
      if (q.fit_attention) todo.push_back({i, with_curve(base, 1, half, 1, 0.5)});
    }
  }
  const auto out = predict_all(q.runs, prepared, todo, q.engine, jobs);
  Grid grid;
  grid.predictions = static_cast<int>(todo.size());
  std::string last_error;
  for (std::size_t k = 0, h = 0; h < kHalfGrid.size(); ++h) {
    std::vector<Line> lines;
    bool ok = true;
    for (std::size_t i = 0; i < q.runs.size(); ++i) {
      if (!fitted[i]) continue;
      const Outcome &t11 = out[k], &t21 = out[k + 1], &t12 = out[k + 2], &ta = out[q.fit_attention ? k + 3 : k];
      k += q.fit_attention ? 4 : 3;
      for (const auto* o : {&t11, &t21, &t12, &ta}) {
        if (!o->error.empty()) ok = false, last_error = o->error;
      }
      const double a = t21.step_s - t11.step_s, g = t12.step_s - t11.step_s, att = ta.step_s - t11.step_s;
      lines.push_back({i, t11.step_s - a - g - att, a, g, att});
    }
    if (ok) grid.lines.push_back(lines), grid.halves.push_back(kHalfGrid[h]);
  }
  if (grid.lines.empty()) throw Error("calibrate --runs: no prediction of the fitted runs succeeded: " + last_error);
  return grid;
}

// The grid's best point on the lines `keep` selects.
Point fit_on(const Grid& grid, const std::vector<double>& measured, bool attention,
             const std::function<bool(const Line&)>& keep) {
  Point best{INFINITY};
  for (std::size_t h = 0; h < grid.lines.size(); ++h) {
    std::vector<Line> kept;
    for (const auto& l : grid.lines[h]) {
      if (keep(l)) kept.push_back(l);
    }
    const Point p = best_on(kept, measured, grid.halves[h], attention);
    if (p.error < best.error) best = p;
  }
  return best;
}

}  // namespace

RunsFit calibrate_runs(const RunsFitRequest& q) {
  const auto& runs = q.runs;
  if (runs.empty()) throw Error("calibrate --runs: no runs");
  const int jobs = q.jobs > 0 ? q.jobs : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::vector<bool> fitted = fitted_runs(q);
  const models::Hardware base = base_hardware(runs);
  if (q.fit_attention && base.device.attention.empty()) {
    throw Error("calibrate --runs --fit-attention: " + runs.front().hardware +
                " gives no fused attention kernel's rates (device.attention) to fit");
  }
  std::vector<Prepared> prepared;
  std::vector<double> measured;
  for (const auto& r : runs) {
    try {
      const auto sc = build_scenario(load_run_model(r), base, spec_of(r), /*validate=*/false);
      prepared.push_back({sc->model, sc->program, sc->request, sc->samples});
    } catch (const Error& e) {
      throw Error(r.source + " (" + r.name + "): " + e.what());
    }
    const double flops = r.tflops_per_gpu > 0 ? run_flops(r, prepared.back().model) : 0;
    measured.push_back(r.step_s > 0 ? r.step_s : flops / (r.tflops_per_gpu * 1e12 * r.gpus()));
  }
  const Grid grid = predict_grid(q, fitted, prepared, base, jobs);
  RunsFit out;
  const Point best = fit_on(grid, measured, q.fit_attention, [](const Line&) { return true; });
  out.max = best.max, out.half_flops = best.half, out.memory_efficiency = best.mem;
  out.attention_scale = q.fit_attention ? best.att : 0;
  out.hardware = with_curve(base, best.max, best.half, best.mem, best.att);
  out.rms_log_residual = std::sqrt(best.error / static_cast<double>(grid.lines.front().size()));
  // Every run on the fitted hardware itself.
  std::vector<Job> final_jobs;
  for (std::size_t i = 0; i < runs.size(); ++i) final_jobs.push_back({i, out.hardware});
  const auto finals = predict_all(runs, prepared, final_jobs, q.engine, jobs);
  out.predictions = grid.predictions + static_cast<int>(final_jobs.size());
  std::vector<double> errors, loo;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const MeasuredRun& r = runs[i];
    if (!finals[i].error.empty()) throw Error(finals[i].error);
    RunOutcome o;
    o.name = r.name, o.fitted = fitted[i], o.engine = finals[i].engine;
    o.measured_s = measured[i], o.predicted_s = finals[i].step_s;
    if (!finals[i].fits) o.note = "out of memory in the twin";
    // In the run's units: TFLOP/s per GPU (higher is faster) or seconds.
    const auto error_of = [&](double predicted_s) {
      return r.tflops_per_gpu > 0 ? measured[i] / predicted_s - 1 : predicted_s / measured[i] - 1;
    };
    if (r.tflops_per_gpu > 0) {
      o.measured_tflops = r.tflops_per_gpu;
      o.predicted_tflops = r.tflops_per_gpu * measured[i] / o.predicted_s;
    }
    o.error = error_of(o.predicted_s);
    if (o.fitted && std::count(fitted.begin(), fitted.end(), true) > 1) {
      const Point p = fit_on(grid, measured, q.fit_attention, [&](const Line& l) { return l.run != i; });
      const auto& lines = grid.at(p.half);
      const auto own = std::find_if(lines.begin(), lines.end(), [&](const Line& l) { return l.run == i; });
      o.loo_error = error_of(own->at(p.max, p.mem, p.att));
      loo.push_back(std::abs(o.loo_error));
    } else if (!o.fitted) {
      errors.push_back(std::abs(o.error));
    }
    out.runs.push_back(o);
  }
  out.median_error = schedule::median(errors);
  out.worst_error = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  out.median_loo_error = schedule::median(loo);
  out.worst_loo_error = loo.empty() ? 0 : *std::max_element(loo.begin(), loo.end());
  out.hardware.prediction_error = std::max(out.worst_error, out.worst_loo_error);
  return out;
}

nlohmann::json runs_fit_json(const RunsFit& f) {
  nlohmann::json j{{"fit", {{"max", f.max}, {"half_flops", f.half_flops}, {"memory_efficiency", f.memory_efficiency},
                            {"attention_scale", f.attention_scale}, {"rms_log_residual", f.rms_log_residual}}},
                   {"predicted", {{"median_error", f.median_error}, {"worst_error", f.worst_error}}},
                   {"leave_one_out", {{"median_error", f.median_loo_error}, {"worst_error", f.worst_loo_error}}},
                   {"predictions", f.predictions}};
  for (const auto& r : f.runs) {
    nlohmann::json row{{"name", r.name},          {"role", r.fitted ? "fit" : "predict"}, {"measured_step_s", r.measured_s},
                       {"predicted_step_s", r.predicted_s}, {"error", r.error}, {"engine", r.engine}};
    if (r.measured_tflops > 0) row["measured_tflops_per_gpu"] = r.measured_tflops, row["predicted_tflops_per_gpu"] = r.predicted_tflops;
    if (r.fitted) row["leave_one_out_error"] = r.loo_error;
    if (!r.note.empty()) row["note"] = r.note;
    j["runs"].push_back(row);
  }
  return j;
}

std::string runs_fit_text(const RunsFit& f) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "fitted: efficiency max %.4f, half_flops %.3g, memory_efficiency %.4f", f.max, f.half_flops,
                f.memory_efficiency);
  out += line;
  if (f.attention_scale > 0) {
    std::snprintf(line, sizeof line, ", attention rates x %.4f", f.attention_scale);
    out += line;
  }
  std::snprintf(line, sizeof line, " (rms log residual %.4f)\n\n", f.rms_log_residual);
  out += line;
  int width = 16;  // the longest name's
  for (const auto& r : f.runs) width = std::max(width, static_cast<int>(std::min<std::size_t>(r.name.size(), 60)));
  std::snprintf(line, sizeof line, "%-*s %-8s %12s %12s %9s %9s  %s\n", width, "run", "role", "measured", "predicted",
                "error", "LOO", "engine");
  out += line;
  for (const auto& r : f.runs) {
    char m[32], pred[32], loo[32];
    if (r.measured_tflops > 0) {
      std::snprintf(m, sizeof m, "%.1f TF", r.measured_tflops);
      std::snprintf(pred, sizeof pred, "%.1f TF", r.predicted_tflops);
    } else {
      std::snprintf(m, sizeof m, "%.4g s", r.measured_s);
      std::snprintf(pred, sizeof pred, "%.4g s", r.predicted_s);
    }
    if (r.fitted) {
      std::snprintf(loo, sizeof loo, "%+.1f%%", 100 * r.loo_error);
    } else {
      std::snprintf(loo, sizeof loo, "-");
    }
    std::snprintf(line, sizeof line, "%-*s %-8s %12s %12s %+8.1f%% %9s  %s%s%s\n", width, r.name.c_str(), r.fitted ? "fit" : "predict",
                  m, pred, 100 * r.error, loo, r.engine.c_str(), r.note.empty() ? "" : "  ", r.note.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "\npredicted runs: median error %.1f%%, worst %.1f%%; fitted runs left out one at a time: median %.1f%%, worst %.1f%%\n",
                100 * f.median_error, 100 * f.worst_error, 100 * f.median_loo_error, 100 * f.worst_loo_error);
  out += line;
  return out;
}

}  // namespace pipetwin::twin
