// `pipetwin sweep`: simulate every combination of schedules x recompute x K x M
// into one CSV, several SimGrid processes at a time. Rows come in a fixed
// order; the file on disk is always whole (rewritten through a rename after
// each row), so an interrupted sweep resumes where it stopped.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <map>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/scenario.hpp"
#include "models/partition.hpp"
#include "models/summary.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "sim/from_model.hpp"

namespace pipetwin::cli {
namespace {

const char* kHeader =
    "schedule,recompute,ranks,virtual,microbatches,batch,status,step_time_s,throughput_samples_per_s,bubble_fraction,"
    "max_stage_memory_gb,reason";
constexpr int kKeyColumns = 6;

struct Options {
  std::string model, hardware, out;
  std::vector<int> ranks, microbatches;
  std::vector<std::string> schedules, recompute{"none"};
  int virtual_stages = 2, microbatch_size = 1, jobs = 0;  // V applies to interleaved-1f1b only
  std::string partition = "auto", optimizer = "adam";
};

struct Config {
  std::string schedule, recompute;
  int ranks, microbatches;
};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return q + "\"";
}

std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

class Sweep {
 public:
  explicit Sweep(const Options& o) : o_(o) {
    for (const auto& s : o.schedules)
      for (const auto& r : o.recompute)
        for (const int k : o.ranks)
          for (const int m : o.microbatches) configs_.push_back({s, r, k, m});
    rows_.resize(configs_.size());
    load_existing();
  }

  int run() {
    const int jobs = o_.jobs > 0 ? o_.jobs : static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    std::deque<std::size_t> todo;
    for (std::size_t i = 0; i < configs_.size(); ++i) {
      if (rows_[i].empty()) todo.push_back(i);
    }
    resumed_ = configs_.size() - todo.size();
    struct Running {
      std::size_t index;
      sim::SimProcess process;
      std::unique_ptr<Scenario> scenario;
      std::string data;
    };
    std::vector<Running> running;
    progress();
    while (!todo.empty() || !running.empty()) {
      while (!todo.empty() && static_cast<int>(running.size()) < jobs) {
        const std::size_t i = todo.front();
        todo.pop_front();
        try {
          auto sc = build_scenario(scenario_options(configs_[i]));
          const auto process = sim::start_simulation(sim::sim_input(*sc->costs, sc->hardware, sc->program));
          running.push_back({i, process, std::move(sc), {}});
        } catch (const models::OutOfMemory& e) {
          finish_row(i, "oom", {}, e.what());
        } catch (const Error& e) {
          finish_row(i, "error", {}, e.what());
        }
      }
      if (running.empty()) continue;
      std::vector<pollfd> fds;
      for (const auto& r : running) fds.push_back({r.process.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        throw Error("sweep: poll failed");
      }
      for (std::size_t j = running.size(); j-- > 0;) {
        if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[1 << 16];
        const ssize_t n = ::read(running[j].process.fd, buf, sizeof buf);
        if (n > 0) {
          running[j].data.append(buf, static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        Running done = std::move(running[j]);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(j));
        try {
          const auto result = sim::finish_simulation(done.process, done.data);
          const auto& sc = *done.scenario;
          finish_row(done.index, "", models::summarize(result.timeline, sc.samples, *sc.costs, sc.program.partition, "simgrid"), "");
        } catch (const Error& e) {
          finish_row(done.index, "error", {}, e.what());
        }
      }
    }
    if (bar_) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "sweep: %zu configurations (%zu resumed, %zu evaluated now, %d of them not runnable) -> %s\n",
                 configs_.size(), resumed_, configs_.size() - resumed_, errors_, o_.out.c_str());
    return 0;
  }

 private:
  ScenarioOptions scenario_options(const Config& c) const {
    ScenarioOptions s;
    s.model = o_.model;
    s.hardware = o_.hardware;
    s.schedule = c.schedule;
    s.ranks = c.ranks;
    s.microbatches = c.microbatches;
    s.virtual_stages = c.schedule == "interleaved-1f1b" ? o_.virtual_stages : 1;
    s.batch = c.microbatches * o_.microbatch_size;
    s.recompute = c.recompute;
    s.partition = o_.partition;
    s.optimizer = o_.optimizer;
    return s;
  }

  std::string key(const Config& c) const {
    const int v = c.schedule == "interleaved-1f1b" ? o_.virtual_stages : 1;
    return c.schedule + "," + c.recompute + "," + std::to_string(c.ranks) + "," + std::to_string(v) + "," +
           std::to_string(c.microbatches) + "," + std::to_string(c.microbatches * o_.microbatch_size);
  }

  void load_existing() {
    if (!std::filesystem::exists(o_.out)) return;
    std::istringstream in(schedule::read_file(o_.out));
    std::string line;
    if (!std::getline(in, line) || line != kHeader) {
      throw Error(o_.out + ":1: not a results file of this sweep (its header differs); choose another --out");
    }
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < configs_.size(); ++i) index[key(configs_[i])] = i;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      std::size_t pos = 0;
      for (int c = 0; c < kKeyColumns && pos != std::string::npos; ++c) pos = line.find(',', pos + (c ? 1 : 0));
      const auto it = pos == std::string::npos ? index.end() : index.find(line.substr(0, pos));
      if (it != index.end()) rows_[it->second] = line;
      else foreign_.push_back(line);
    }
  }

  void finish_row(std::size_t i, std::string status, const models::RunSummary& s, const std::string& reason) {
    double max_memory = 0;
    std::string why = reason;
    for (std::size_t st = 0; st < s.memory.size(); ++st) {
      max_memory = std::max(max_memory, s.memory[st].peak_bytes);
      if (!s.memory[st].fits() && why.empty()) {
        why = "stage " + std::to_string(st) + " needs " + num(s.memory[st].peak_bytes / 1e9) + " GB of " +
              num(s.memory[st].capacity_bytes / 1e9) + " GB";
      }
    }
    if (status.empty()) status = s.fits() ? "ok" : "oom";
    const bool ran = !s.busy_s.empty();
    if (!ran) ++errors_;
    rows_[i] = key(configs_[i]) + "," + status + "," + (ran ? num(s.step_time_s) : "") + "," + (ran ? num(s.throughput) : "") +
               "," + (ran ? num(s.bubble) : "") + "," + (ran ? num(max_memory / 1e9) : "") + "," + csv_field(why);
    ++completed_;
    write();
    progress();
  }

  void write() const {
    std::string text = std::string(kHeader) + "\n";
    for (const auto& row : rows_) {
      if (!row.empty()) text += row + "\n";
    }
    for (const auto& row : foreign_) text += row + "\n";
    schedule::write_file_atomic(o_.out, text);
  }

  void progress() {
    if (!bar_) return;
    const std::size_t total = configs_.size() - resumed_;
    const int width = 40;
    const int filled = total ? static_cast<int>(width * completed_ / total) : width;
    std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 completed_, total);
    std::fflush(stderr);
  }

  const Options& o_;
  std::vector<Config> configs_;
  std::vector<std::string> rows_, foreign_;
  std::size_t completed_ = 0, resumed_ = 0;
  int errors_ = 0;
  bool bar_ = ::isatty(2) && !std::getenv("CI");
};

}  // namespace

Run add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("sweep", "Simulate every schedule x recompute x K x M combination into one CSV");
  cmd->add_option("--model", o->model, "Model spec (YAML)")->required();
  cmd->add_option("--hardware", o->hardware, "Hardware preset name or YAML file")->required();
  cmd->add_option("--ranks,-k", o->ranks, "Ranks K, comma-separated")->required()->delimiter(',')->check(CLI::PositiveNumber);
  cmd->add_option("--microbatches,-m", o->microbatches, "Micro-batches M, comma-separated")
      ->required()
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  std::vector<std::string> names;
  for (const auto& g : schedule::generators()) names.emplace_back(g.name);
  cmd->add_option("--schedules,-s", o->schedules, "Schedules, comma-separated")->required()->delimiter(',')->check(CLI::IsMember(names));
  cmd->add_option("--recompute", o->recompute, "Recompute policies, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "full", "except-last"}))
      ->capture_default_str();
  cmd->add_option("--virtual,-v", o->virtual_stages, "V for interleaved-1f1b")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--microbatch-size", o->microbatch_size, "Samples per micro-batch (batch = M x this)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--partition", o->partition, "auto, uniform or parameters")
      ->check(CLI::IsMember({"auto", "optimal", "uniform", "parameters"}))
      ->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "Optimizer")->check(CLI::IsMember({"sgd", "momentum", "adam"}))->capture_default_str();
  cmd->add_option("--out,-o", o->out, "Results CSV (resumed if it exists)")->required();
  cmd->add_option("--jobs,-j", o->jobs, "Simulations in flight (default: cores)")->check(CLI::PositiveNumber);
  return [o] { return Sweep(*o).run(); };
}

}  // namespace pipetwin::cli
