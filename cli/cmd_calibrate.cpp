// `pipetwin calibrate`: fit measured traces back into a hardware profile.
//
//   pipetwin calibrate TRACE... --hardware BASE --out CALIBRATED.yaml [--microbench]
//
// Reads the traces (`pipetwin run --trace`), refuses those that do not fit
// together, fits per-kind efficiency curves, overheads, the optimizer step and
// the link (calibration/fit.hpp), writes a hardware file that every command
// reads with --hardware, and replays each traced configuration on it to show
// how well the calibrated simulator reproduces the measured step.
#include <cstdio>

#include "cli/commands.hpp"
#include "models/hardware.hpp"
#include "schedule/io.hpp"
#include "twin/calibrate.hpp"
#include "twin/engine.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::CalibrateRequest request;
  std::string engine = "auto";
  bool json = false;
};

int run(Options& o) {
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
  cmd->add_option("traces", o->request.traces, "Measured traces (pipetwin run --trace)");
  cmd->add_option("--hardware", o->request.hardware, "Base hardware (preset or YAML) the fit starts from")->capture_default_str();
  cmd->add_option("--out", o->request.out, "The calibrated hardware file to write (atomically)")->required();
  auto* microbench = cmd->add_flag("--microbench", o->request.microbench,
                "Also run short configurations through pipetwin run (one and two ranks, several micro-batch sizes, "
                "recompute) and fit their traces too");
  cmd->add_option("--model", o->request.model, "Model spec for --microbench (default: the traces' model)");
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
  return [o] { return run(*o); };
}

}  // namespace pipetwin::cli
