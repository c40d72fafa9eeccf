// `pipetwin calibrate`: fit measured traces back into a hardware profile.
//
//   pipetwin calibrate TRACE... --hardware BASE --out CALIBRATED.yaml [--microbench]
//
// Reads the traces (`pipetwin run --trace`), refuses those that do not fit
// together, fits per-kind efficiency curves, overheads, the optimizer step and
// the link (calibration/fit.hpp), writes a hardware file that every command
// reads with --hardware, and replays each traced configuration on it to show
// how well the calibrated simulator reproduces the measured step.
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "calibration/fit.hpp"
#include "calibration/noise.hpp"
#include "calibration/traces.hpp"
#include "cli/commands.hpp"
#include "twin/calibrate.hpp"
#include "models/hardware.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/trace_metadata.hpp"

namespace pipetwin::cli {
namespace {

namespace fs = std::filesystem;

struct Options {
  std::vector<std::string> traces;
  std::string hardware = "cpu", out, model, microbench_dir, engine = "auto";
  bool microbench = false, json = false;
  int threads = 0, steps = 6, microbench_repeats = 1;
};

// Runs `pipetwin run ...` (this executable) and waits; its output goes to `log`.
void run_child(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv{"pipetwin"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error("calibrate --microbench: cannot start: " + line);
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f != nullptr) ::dup2(::fileno(stdout), 2);
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv("/proc/self/exe", raw.data());
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error("calibrate --microbench: `" + line + "` failed (its output: " + log + ")");
  }
}

// The CPUs this process may run on (its affinity), as pipetwin run records a host's cores.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// Short runs that separate what the given traces may not: the first and the
// last layer alone on a rank (their kinds' fixed costs), several micro-batch
// sizes on one rank (the curves' slopes), recompute (the forward without
// autograd, and the recompute itself), and each half of the layers alone
// (layers of one kind whose weights differ). On a host with few cores, also twice
// as many ranks as the cores hold (gpipe and 1f1b, and gpipe at micro-batches
// of four): how its ranks share the cores, which no run of one or two ranks
// shows.
std::vector<std::string> microbench(const Options& o, const std::string& model_path, int layers, int threads,
                                    const std::string& dir) {
  fs::create_directories(dir);
  struct Config {
    std::string name, schedule;
    int ranks, microbatches, batch;
    std::string recompute, partition;
  };
  const std::string half = "0:" + std::to_string(layers / 2) + " " + std::to_string(layers / 2) + ":" + std::to_string(layers);
  const std::string first = "0:1 1:" + std::to_string(layers);
  const std::string last = "0:" + std::to_string(layers - 1) + " " + std::to_string(layers - 1) + ":" + std::to_string(layers);
  // Four micro-batches each (a median per stage), gpipe: on two ranks the
  // stages' forwards and backwards mostly run alone.
  std::vector<Config> configs{
      {"k1_mb1", "gpipe", 1, 4, 4, "none", ""},        {"k1_mb4", "gpipe", 1, 4, 16, "none", ""},
      {"k1_mb16", "gpipe", 1, 4, 64, "none", ""},      {"k1_mb4_recompute", "gpipe", 1, 4, 16, "full", ""},
      {"k1_mb16_recompute", "gpipe", 1, 4, 64, "full", ""},
  };
  if (layers >= 2) {
    configs.push_back({"k2_first_mb2", "gpipe", 2, 4, 8, "none", first});
    configs.push_back({"k2_first_mb16", "gpipe", 2, 4, 64, "none", first});
    configs.push_back({"k2_last_mb2", "gpipe", 2, 4, 8, "none", last});
    configs.push_back({"k2_last_mb16", "gpipe", 2, 4, 64, "none", last});
    configs.push_back({"k2_half_mb8_recompute", "gpipe", 2, 4, 32, "full", half});
    // Each half of the layers alone, one micro-batch a step: with M=1 no
    // action runs beside another on any host, so that each half's forward
    // and backward get rows of their own. Layers of one kind and like work
    // may differ in their weights (a ResNet's late blocks hold 16x its early
    // ones' at the same FLOPs), which a run of every layer at once cannot
    // tell apart, and which decide how a partition balances.
    configs.push_back({"k2_half_mb2", "gpipe", 2, 1, 2, "none", half});
    configs.push_back({"k2_half_mb16", "gpipe", 2, 1, 16, "none", half});
  }
  const int cores = usable_cores() / std::max(1, threads);
  const int shared = std::min(layers, 2 * cores);
  if (cores >= 1 && shared > cores && shared >= 3) {
    const std::string k = std::to_string(shared);
    configs.push_back({"k" + k + "_shared_gpipe", "gpipe", shared, 2 * shared, 2 * shared, "none", ""});
    configs.push_back({"k" + k + "_shared_1f1b", "1f1b", shared, 2 * shared, 2 * shared, "none", ""});
    // Micro-batches of four too: whether those runs' actions lose a share of
    // their work or a time each (oversubscribed_action_us), which runs of one
    // micro-batch size cannot tell apart.
    configs.push_back({"k" + k + "_shared_gpipe_mb4", "gpipe", shared, 2 * shared, 8 * shared, "none", ""});
  }
  // Repeat by repeat, every configuration once in each: a slow spell of the
  // host lands on one repeat of several configurations, which the fit's
  // robust (per-group median) rows outvote, not on every run of one.
  const int repeats = o.microbench_repeats;
  std::vector<std::string> traces;
  for (std::size_t n = 0; n < configs.size() * repeats; ++n) {
    const std::size_t i = n % configs.size();
    const int repeat = static_cast<int>(n / configs.size()) + 1;
    const auto& c = configs[i];
    const std::string name = repeats > 1 ? c.name + "_r" + std::to_string(repeat) : c.name;
    const std::string trace = dir + "/" + name + ".json";
    std::vector<std::string> args{"run", "--model", model_path, "-s", c.schedule, "-k", std::to_string(c.ranks),
                                  "-m", std::to_string(c.microbatches), "--batch", std::to_string(c.batch),
                                  "--recompute", c.recompute, "--steps", std::to_string(o.steps), "--threads",
                                  std::to_string(threads), "--trace", trace};
    if (!c.partition.empty()) {
      const std::string file = dir + "/" + c.name + ".partition";
      schedule::write_file_atomic(file, c.partition + "\n");
      args.insert(args.end(), {"--partition", file});
    }
    if (!o.json) std::printf("microbench %zu/%zu  %s\n", n + 1, configs.size() * repeats, name.c_str());
    std::fflush(stdout);
    run_child(args, dir + "/" + name + ".log");
    traces.push_back(trace);
  }
  return traces;
}

// How ranks beyond the cores share them, as fitted.
std::string sharing_way(const models::Topology& t) {
  if (!t.run_to_completion) return "ranks share the cores evenly";
  std::string way = "a rank keeps a core until it receives a message";
  if (t.time_slice_s > 0) {
    way += " or its " + std::to_string(static_cast<int>(t.time_slice_s * 1e6)) + " us time slice ends while another waits";
  }
  if (t.wake_preempt_s > 0) {
    way += ", or, within " + std::to_string(static_cast<int>(t.wake_preempt_s * 1e6)) + " us, a rank woken by a message waits";
  }
  if (t.core_affinity) way += "; each core queues the ranks that last ran on it";
  return way;
}

// Something to fit, and file names that the calibrated YAML (UTF-8 only) can record.
void check_names(const Options& o) {
  if (o.traces.empty() && !o.microbench) throw Error("calibrate: give traces (pipetwin run --trace FILE), --microbench, or both");
  std::vector<const std::string*> all{&o.out};
  for (const auto& t : o.traces) all.push_back(&t);
  for (const auto* path : all) {
    try {
      schedule::check_utf8(*path, *path);
    } catch (const Error&) {
      throw Error(*path + ": the file name is not UTF-8, and calibrate records it in the calibrated file: rename it");
    }
  }
}

// The traces given, checked together, then those of the --microbench runs.
std::vector<calibration::TraceRun> load_runs(const Options& o) {
  std::vector<calibration::TraceRun> runs;
  for (const auto& path : o.traces) runs.push_back(calibration::load_trace_run(path));
  if (!runs.empty()) calibration::check_together(runs);
  if (!o.microbench) return runs;
  const std::string dir = !o.microbench_dir.empty() ? o.microbench_dir : o.out + ".microbench";
  fs::create_directories(dir);
  std::string model_path = o.model;
  int layers = 0;
  if (model_path.empty()) {
    if (runs.empty()) throw Error("calibrate --microbench without traces needs --model");
    model_path = dir + "/model.yaml";
    schedule::write_file_atomic(model_path, runs.front().model_spec);
    layers = static_cast<int>(runs.front().model.layers.size());
  } else {
    layers = static_cast<int>(models::load_model(model_path).layers.size());
  }
  const int threads = o.threads > 0 ? o.threads : !runs.empty() && !runs.front().threads.empty() ? runs.front().threads.front() : 1;
  for (const auto& path : microbench(o, model_path, layers, threads, dir)) runs.push_back(calibration::load_trace_run(path));
  calibration::check_together(runs);  // the given model against the traces'
  return runs;
}

calibration::NoiseFloor step_noise_floor(const std::vector<calibration::TraceRun>& runs, const std::vector<double>& predicted) {
  std::vector<std::string> names;
  std::vector<double> errors;
  for (std::size_t i = 0; i < runs.size() && i < predicted.size(); ++i) {
    // One configuration: the fields compare checks two traces share, and the threads.
    nlohmann::json key = nlohmann::json::object();
    for (const auto& field : schedule::configuration_fields()) {
      if (runs[i].trace.metadata.contains(field)) key[field] = runs[i].trace.metadata[field];
    }
    key["threads"] = runs[i].threads;
    names.push_back(key.dump());
    errors.push_back(predicted[i] / runs[i].step_time_s - 1);
  }
  return calibration::noise_floor(names, errors);
}

void print_json(const Options& o, const std::vector<calibration::TraceRun>& runs, const twin::Calibrated& c,
                const std::vector<std::string>& engines) {
  const auto& result = c.fit;
  const auto& predicted = c.predicted_step_s;
  nlohmann::json j;
  j["out"] = o.out;
  j["traces"] = nlohmann::json::array();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    j["traces"].push_back({{"file", runs[i].path}, {"config", runs[i].describe()}, {"measured_step_s", runs[i].step_time_s},
                           {"predicted_step_s", predicted[i]}, {"engine", engines[i]}});
  }
  for (const auto& [op, r] : result.residuals) {
    j["residuals"][op] = {{"count", r.count}, {"rms_s", r.rms_s}, {"max_s", r.max_s}, {"rms_rel", r.rms_rel}, {"max_rel", r.max_rel}};
  }
  j["residuals"]["overall"] = {{"count", result.overall.count}, {"rms_s", result.overall.rms_s}, {"max_s", result.overall.max_s},
                               {"rms_rel", result.overall.rms_rel}, {"max_rel", result.overall.max_rel}};
  const auto floor = step_noise_floor(runs, predicted);
  j["noise_floor"] = {{"configurations", floor.configurations}, {"runs", floor.runs},
                      {"run_sd_rel", floor.run_sd_rel}, {"all_configurations", floor.all_configurations},
                      {"mean_error_rms_rel", floor.mean_error_rms_rel},
                      {"mean_error_worst_rel", floor.mean_error_worst_rel}, {"typical_runs", floor.typical_runs}};
  j["notes"] = result.notes;
  std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_text(const Options& o, const std::vector<calibration::TraceRun>& runs, const models::Hardware& base,
                const twin::Calibrated& c, const std::vector<std::string>& engines) {
  const auto& result = c.fit;
  const auto& predicted = c.predicted_step_s;
  const auto& d = result.hardware.device;
  std::printf("calibrated   %s from %zu trace(s) of %s, starting from %s\n", o.out.c_str(), runs.size(),
              runs.front().model.name.c_str(), base.name.c_str());
  std::printf("kinds        efficiency (share of %.4g GFLOP/s) at each work the traces ran (FLOPs x micro-batch size):\n",
              d.peak_flops(runs.front().model.precision) / 1e9);
  for (const auto& [kind, c] : d.kinds) {
    for (const models::Pass pass : models::kPasses) {
      const auto& e = c.of(pass);
      std::string line;
      char item[64];
      for (const auto& [w, eff] : e.points) {
        std::snprintf(item, sizeof item, "%s%.3g: %.3f", line.empty() ? "" : ", ", w, eff);
        line += item;
      }
      if (e.points.empty()) {
        std::snprintf(item, sizeof item, "max %.3f, half %.3g%s", e.max, e.half_flops, c.per_operator ? " per operator" : "");
        line = item;
      }
      std::printf("  %-18s %-15s %s\n", kind.c_str(), std::string(models::pass_name(pass)).c_str(), line.c_str());
    }
  }
  std::printf("overheads    per action: forward %.1f us, backward %.1f us; step %.1f us\n",
              d.action_overhead.forward_s * 1e6, d.action_overhead.backward_s * 1e6, d.step_overhead() * 1e6);
  std::printf("transfers    send %.1f us + %.3g GB/s; receive %.1f us + %.3g GB/s; link latency %.1f us, %.3g GB/s\n",
              d.transfer_overhead_s * 1e6, d.send_bandwidth / 1e9, d.recv_overhead_s * 1e6, d.recv_bandwidth / 1e9,
              result.hardware.topology.intra.latency_s * 1e6, result.hardware.topology.intra.bandwidth / 1e9);
  if (d.weight_stream != models::ActionOverheads{}) {
    const auto rate = [](double s_per_byte) { return s_per_byte > 0 ? 1 / s_per_byte / 1e9 : 0.0; };
    std::printf("weights      each pass of a layer streams its weights beyond its curve: forward at %.3g GB/s, "
                "backward at %.3g GB/s (0: none)\n",
                rate(d.weight_stream.forward_s), rate(d.weight_stream.backward_s));
  }
  std::printf("step         memory bandwidth %.3g GB/s (optimizer step)\n", d.memory_bandwidth / 1e9);
  if (d.cold_weights_bandwidth > 0) {
    std::printf("cold         each stage's first forward in a step reads its weights at %.3g GB/s\n",
                d.cold_weights_bandwidth / 1e9);
  }
  if (result.hardware.topology.kind == models::TopologyKind::SharedHost) {
    const auto& t = result.hardware.topology;
    std::printf("sharing      %d cores, %.3g effective; with more ranks than cores, %.3g effective, %s, each forward "
                "and backward takes %.1f%% longer, and each send waits %.1f us and each receive %.1f us more for a core\n",
                t.host_cores, t.compute_capacity(), t.compute_capacity(t.host_cores + 1), sharing_way(t).c_str(),
                100 * t.oversubscribed_compute,
                t.oversubscribed_send_s * 1e6, t.oversubscribed_recv_s * 1e6);
    if (t.full_host_send_s + t.full_host_recv_s > 0) {
      std::printf("full host    with as many ranks as cores, each send waits %.1f us and each receive %.1f us more for a "
                  "core, on average\n",
                  t.full_host_send_s * 1e6, t.full_host_recv_s * 1e6);
    }
  }
  if (const auto& t = result.hardware.topology; t.collective.bandwidth > 0) {
    std::printf("collectives  each ring round %.1f us + its bytes at %.3g GB/s of one core's work\n",
                t.collective.latency_s * 1e6, t.collective.bandwidth / 1e9);
  }
  if (const auto& t = result.hardware.topology; t.tensor_collective.bandwidth > 0) {
    std::printf("tensor       each ring round of a tensor group %.1f us + its bytes at %.3g GB/s (the members' waits "
                "included); a member computes %.1f%% longer than its 1/T of the work\n",
                t.tensor_collective.latency_s * 1e6, t.tensor_collective.bandwidth / 1e9, 100 * t.tensor_compute);
  }
  std::printf("residuals    per-stage medians, predicted - measured (rms / max):\n");
  for (const auto& [op, r] : result.residuals) {
    std::printf("  %-16s %3d groups  %8.1f / %8.1f us   %5.2f%% / %5.2f%%\n", op.c_str(), r.count, r.rms_s * 1e6,
                r.max_s * 1e6, 100 * r.rms_rel, 100 * r.max_rel);
  }
  std::printf("steps        measured -> calibrated simulation:\n");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::printf("  %-44s %9.4f s -> %9.4f s  %+6.2f%%  (%s)\n", runs[i].describe().c_str(), runs[i].step_time_s, predicted[i],
                100 * (predicted[i] / runs[i].step_time_s - 1), engines[i].c_str());
  }
  if (const auto floor = step_noise_floor(runs, predicted).describe(); !floor.empty()) {
    std::printf("noise floor  %s\n", floor.c_str());
  }
  for (const auto& n : result.notes) std::printf("note         %s\n", n.c_str());
}


int run(const Options& o) {
  check_names(o);
  const models::Hardware base = models::load_hardware(o.hardware);
  const auto runs = load_runs(o);
  const auto c = twin::calibrate(runs, base, twin::parse_engine(o.engine), o.out);
  std::vector<std::string> engines;
  for (const auto e : c.engines) engines.emplace_back(twin::engine_name(e));
  schedule::write_file_atomic(o.out, c.yaml);

  if (o.json) {
    print_json(o, runs, c, engines);
  } else {
    print_text(o, runs, base, c, engines);
  }
  return 0;
}

}  // namespace

Run add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("calibrate", "Fit measured traces into a calibrated hardware profile (YAML)");
  cmd->add_option("traces", o->traces, "Measured traces (pipetwin run --trace)");
  cmd->add_option("--hardware", o->hardware, "Base hardware (preset or YAML) the fit starts from")->capture_default_str();
  cmd->add_option("--out", o->out, "The calibrated hardware file to write (atomically)")->required();
  auto* microbench = cmd->add_flag("--microbench", o->microbench,
                "Also run short configurations through pipetwin run (one and two ranks, several micro-batch sizes, "
                "recompute) and fit their traces too");
  cmd->add_option("--model", o->model, "Model spec for --microbench (default: the traces' model)");
  cmd->add_option("--microbench-dir", o->microbench_dir, "Where --microbench writes its traces (default: OUT.microbench)");
  cmd->add_option("--threads", o->threads, "Intra-op threads per rank in --microbench (default: the traces')")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--steps", o->steps, "Steps per --microbench run")->check(CLI::Range(2, 1000))->capture_default_str();
  cmd->add_option("--microbench-repeats", o->microbench_repeats,
                  "Runs of each --microbench configuration, interleaved (all of them once, then again); the fit reads "
                  "them all")
      ->check(CLI::Range(1, 100))
      ->needs(microbench)
      ->capture_default_str();
  cmd->add_option("--engine", o->engine, "Engine of the replay of each traced configuration")
      ->check(CLI::IsMember({"auto", "simgrid", "fast"}))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable summary");
  return [o] { return run(*o); };
}

}  // namespace pipetwin::cli
