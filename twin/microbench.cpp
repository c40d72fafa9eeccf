// load_calibration_runs: the traces given and the --microbench runs.
#include "twin/microbench.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "models/families.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "twin/executables.hpp"

namespace pipetwin::twin {
namespace {

namespace fs = std::filesystem;

// Runs `pipetwin run ...` (the executor) and waits; its output goes to `log`.
void run_child(const std::vector<std::string>& args, const std::string& log) {
  const std::string executor = executor_path();
  if (::access(executor.c_str(), X_OK) != 0) {
    throw Error("calibrate --microbench runs its configurations with the executor " + executor +
                ", which is not there: build it with the project (cmake --build build) or set PIPETWIN_EXEC");
  }
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
    ::execv(executor.c_str(), raw.data());
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
std::vector<std::string> microbench(const CalibrateRequest& o, const std::string& model_path, int layers, int threads,
                                    const std::string& dir, const MicrobenchProgress& progress) {
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
    if (progress) progress(std::to_string(n + 1) + "/" + std::to_string(configs.size() * repeats) + "  " + name);
    run_child(args, dir + "/" + name + ".log");
    traces.push_back(trace);
  }
  return traces;
}

// Something to fit, and file names that the calibrated YAML (UTF-8 only) can record.
void check_names(const CalibrateRequest& o) {
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
}  // namespace

std::vector<calibration::TraceRun> load_calibration_runs(const CalibrateRequest& o, const MicrobenchProgress& progress) {
  check_names(o);
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
  for (const auto& path : microbench(o, model_path, layers, threads, dir, progress)) runs.push_back(calibration::load_trace_run(path));
  calibration::check_together(runs);  // the given model against the traces'
  return runs;
}


}  // namespace pipetwin::twin
