// `pipetwin calibrate`: fit measured traces back into a hardware profile.
//
//   pipetwin calibrate TRACE... --hardware BASE --out CALIBRATED.yaml [--microbench]
//   pipetwin calibrate --runs RUNS.csv|megatron.log ... [--fit NAMES] [--out CALIBRATED.yaml]
//
// Reads the traces (`pipetwin run --trace`), refuses those that do not fit
// together, fits per-kind efficiency curves, overheads, the optimizer step and
// the link (calibration/fit.hpp), writes a hardware file that every command
// reads with --hardware, and replays each traced configuration on it to show
// how well the calibrated simulator reproduces the measured step. With
// --runs it fits the device's curve to whole runs and their step times or
// TFLOP/s instead (twin/calibrate_runs.hpp), and predicts the runs it did
// not fit.
#include <algorithm>
#include <cstdio>

#include "cli/commands.hpp"
#include "models/hardware.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "twin/calibrate.hpp"
#include "twin/calibrate_kineto.hpp"
#include "twin/calibrate_runs.hpp"
#include "twin/engine.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::CalibrateRequest request;
  std::string engine = "auto";
  bool json = false;
  std::vector<std::string> runs, fit, torchtitan, held_out;
  int jobs = 0;
  bool hardware_given = false;
  int batch = 0;  // torch.profiler runs: the samples of each run's step
  bool fit_attention = false;  // --runs: also a factor on the hardware's attention rates
};

int run_runs(Options& o) {
  twin::RunsFitRequest q;
  const std::string hardware = o.hardware_given ? o.request.hardware : "";
  q.runs = twin::read_all_runs(o.runs, o.torchtitan, o.request.model, hardware);
  q.fit = o.fit;
  q.engine = twin::parse_engine(o.engine);
  q.jobs = o.jobs;
  q.fit_attention = o.fit_attention;
  const auto f = twin::calibrate_runs(q);
  if (!o.request.out.empty()) {
    std::string fitted_on;
    for (const auto& r : f.runs) fitted_on += "    - " + models::yaml_quoted(r.name + (r.fitted ? "" : " (predicted)")) + "\n";
    schedule::write_file_atomic(o.request.out,
                                models::hardware_to_yaml(f.hardware, "Fitted by pipetwin calibrate --runs to whole runs' speed",
                                                         "calibration:\n  prediction_error: " +
                                                             models::yaml_number(f.hardware.prediction_error.value_or(0)) +
                                                             "\n  fitted_on:\n" + fitted_on));
  }
  if (o.json) {
    std::printf("%s\n", twin::runs_fit_json(f).dump(1).c_str());
  } else {
    std::printf("%s", twin::runs_fit_text(f).c_str());
    if (!o.request.out.empty()) std::printf("wrote %s\n", o.request.out.c_str());
  }
  return 0;
}

// torch.profiler runs (a folder of one trace per rank each): a cost table.
int run_kineto(Options& o) {
  if (o.hardware_given || o.request.microbench || !o.request.model.empty()) {
    throw Error("torch.profiler traces give a cost table (for simulate --costs): --hardware, --microbench and --model "
                "are for pipetwin's own traces");
  }
  const auto c = twin::calibrate_kineto(o.request.traces, o.held_out, o.batch);
  schedule::write_file_atomic(o.request.out, c.yaml);
  if (o.json) {
    std::printf("%s\n", twin::kineto_calibration_json(c).dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%swrote %s\n", twin::kineto_calibration_text(c).c_str(), o.request.out.c_str());
  }
  return 0;
}

int run(Options& o) {
  const auto kineto = [](const std::string& p) { return calibration::is_kineto_file(p); };
  const auto& traces = o.request.traces;
  if (!traces.empty() && std::any_of(traces.begin(), traces.end(), kineto)) {
    for (const auto& t : traces) {
      if (!kineto(t)) {
        throw Error(t + ": one of pipetwin's traces, given with torch.profiler traces: calibrate either kind alone");
      }
    }
    if (!o.runs.empty() || !o.torchtitan.empty()) throw Error("--runs fits whole runs: give no traces with it");
    return run_kineto(o);
  }
  if (!o.held_out.empty()) throw Error("--held-out names torch.profiler runs, predicted beside the ones fitted");
  if (o.batch > 0) throw Error("--batch is the samples per step of torch.profiler runs");
  if (!o.runs.empty() || !o.torchtitan.empty()) {
    if (!o.request.traces.empty() || o.request.microbench) {
      throw Error("--runs fits whole runs: give no traces and no --microbench with it");
    }
    return run_runs(o);
  }
  if (!o.fit.empty()) throw Error("--fit names runs of --runs");
  if (o.fit_attention) throw Error("--fit-attention fits with --runs: give it whole runs");
  auto& r = o.request;
  r.engine = twin::parse_engine(o.engine);
  const models::Hardware base = models::load_hardware(r.hardware);
  const auto print = [](const std::string& line) {
    std::printf("microbench %s\n", line.c_str());
    std::fflush(stdout);
  };
  const auto runs = twin::load_calibration_runs(r, o.json ? twin::MicrobenchProgress() : print);
  const auto c = twin::calibrate(runs, base, r.engine, r.out);
  schedule::write_file_atomic(r.out, c.yaml);
  if (o.json) {
    std::printf("%s\n", twin::calibration_json(r, runs, c).dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s", twin::calibration_text(r, runs, base, c).c_str());
  }
  return 0;
}

}  // namespace

Run add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("calibrate", "Fit measured traces into a calibrated hardware profile (YAML)");
  cmd->add_option("traces", o->request.traces,
                  "Measured traces (pipetwin run --trace), or torch.profiler runs of PyTorch's own schedules: a "
                  "folder of one trace per rank each, fitted into a cost table for simulate --costs");
  cmd->add_option("--held-out", o->held_out,
                  "With torch.profiler runs: more runs (folders) of the same stages, predicted on the fitted table "
                  "and reported beside the fitted ones");
  auto* hardware = cmd->add_option("--hardware", o->request.hardware,
                                   "Base hardware (preset or YAML) the fit starts from (with --runs: a Megatron-LM log's)")
                       ->capture_default_str();
  auto* out = cmd->add_option("--out", o->request.out, "The calibrated hardware file to write (atomically; required with traces)");
  cmd->add_option("--runs", o->runs,
                  "Fit the device's curve to whole runs instead: a runs CSV (docs/calibration.md) or a Megatron-LM "
                  "training log, each; the runs not fitted are predicted");
  cmd->add_option("--torchtitan", o->torchtitan,
                  "Also fit whole runs of torchtitan: its job TOML and its training log (a pair each time), of the "
                  "model --model names on --hardware")
      ->expected(2);
  cmd->add_option("--batch", o->batch,
                  "With torch.profiler runs: the samples of each run's step, so that each micro-batch's size is "
                  "known (batch / M) and runs of two sizes give per-sample times")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--fit", o->fit, "With --runs: the runs fitted, by name (default: those whose role is fit)")->delimiter(',');
  cmd->add_option("--jobs,-j", o->jobs, "With --runs: SimGrid replays at once (0: the cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--fit-attention", o->fit_attention,
                "With --runs: also fit one factor on the hardware's fused attention kernel's rates (device.attention)");
  auto* microbench = cmd->add_flag("--microbench", o->request.microbench,
                "Also run short configurations through pipetwin run (one and two ranks, several micro-batch sizes, "
                "recompute) and fit their traces too");
  cmd->add_option("--model", o->request.model, "Model spec for --microbench (default: the traces' model), or of --torchtitan's runs");
  cmd->add_option("--microbench-dir", o->request.microbench_dir, "Where --microbench writes its traces (default: OUT.microbench)");
  cmd->add_option("--threads", o->request.threads, "Intra-op threads per rank in --microbench (default: the traces')")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--steps", o->request.steps, "Steps per --microbench run")->check(CLI::Range(2, 1000))->capture_default_str();
  cmd->add_option("--microbench-repeats", o->request.microbench_repeats,
                  "Runs of each --microbench configuration, interleaved (all of them once, then again); the fit reads "
                  "them all")
      ->check(CLI::Range(1, 100))
      ->needs(microbench)
      ->capture_default_str();
  cmd->add_option("--engine", o->engine, "Engine of the replay of each traced configuration")
      ->check(CLI::IsMember(twin::engine_names()))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable summary");
  // A command line error (exit 2), as CLI11's own `required` would be, but only without --runs.
  cmd->callback([o, out] {
    if (o->runs.empty() && o->torchtitan.empty() && out->count() == 0) throw CLI::RequiredError("--out");
  });
  return [o, hardware] {
    o->hardware_given = hardware->count() > 0;
    return run(*o);
  };
}

}  // namespace pipetwin::cli
