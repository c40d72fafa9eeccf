// run_sweep: the configurations, the fast path's threads, SimGrid's child
// processes, the results file and its resumption.
#include "twin/sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include "models/layer_graph.hpp"
#include "models/summary.hpp"
#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "twin/simgrid_pool.hpp"

namespace pipetwin::twin {
namespace {

const char* kHeader =
    "schedule,recompute,ranks,virtual,microbatches,batch,status,step_time_s,throughput_samples_per_s,bubble_fraction,"
    "max_stage_memory_gb,engine,reason,tensor,data";
// The key: the first six columns and the last two (T and D, appended after
// the reason so that readers of the first thirteen columns read on).
constexpr int kKeyColumns = 6;
constexpr int kColumns = 15;

struct Config {
  std::string schedule, recompute;
  int microbatch_size, ranks, microbatches, tensor = 1, data = 1;
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
  explicit Sweep(const SweepSpec& o)
      : o_(o),
        model_(models::in_topological_order(models::load_model(o.model))),
        hardware_(models::load_hardware(o.hardware)) {
    check_batch();
    const std::vector<int> sizes = o.batch > 0 ? std::vector<int>{0} : o.microbatch_sizes;
    for (const auto& s : o.schedules)
      for (const auto& r : o.recompute)
        for (const int b : sizes)
          for (const int k : o.ranks)
            for (const int m : o.microbatches)
              for (const int t : o.tensor)
                for (const int d : o.data) configs_.push_back({s, r, b > 0 ? b : o.batch / (m * d), k, m, t, d});
    rows_.resize(configs_.size());
    ready_ = std::make_unique<std::atomic<bool>[]>(configs_.size());
    inputs_ = describe_inputs();
    load_existing();
    // Written before the first row: whatever rows OUT holds, OUT.inputs says what they were computed from.
    schedule::write_file_atomic(inputs_path(), inputs_);
  }

  // --batch splits into M equal micro-batches on each of the D replicas.
  void check_batch() const {
    check_context_attention(o_.context_attention, o_.context_parallel);
    if (o_.max_active_stages > 0 && (o_.zero != 3 || o_.reshard_after_forward)) {
      throw Error("--max-active-stages " + std::to_string(o_.max_active_stages) +
                  " needs --zero 3 --reshard-after-forward off (its UNSHARD gathers a stage whose weights are then kept)");
    }
    if (o_.batch <= 0) return;
    for (const int m : o_.microbatches) {
      for (const int d : o_.data) {
        if (o_.batch % (m * d) == 0) continue;
        throw Error("--batch " + std::to_string(o_.batch) + " does not split into " + std::to_string(m) +
                    " equal micro-batches (--microbatches)" +
                    (d > 1 ? " on each of " + std::to_string(d) + " replicas (--data)" : ""));
      }
    }
  }

  SweepReport run(const SweepProgress& report_progress, const SweepRowCallback& on_row) {
    progress_ = report_progress;
    on_row_ = on_row;
    const int jobs = o_.jobs > 0 ? o_.jobs : static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    std::vector<std::size_t> todo;
    for (std::size_t i = 0; i < configs_.size(); ++i) {
      if (!ready_[i]) todo.push_back(i);
    }
    resumed_ = configs_.size() - todo.size();
    // 1. Each configuration's scenario, built once, and its engine chosen
    // (twin/engine.hpp), in this process on `jobs` threads: the fast path's
    // answers are rows; those SimGrid must answer keep their scenario. With
    // --engine simgrid nothing is chosen here: each scenario is built in
    // step 2 as its replay starts (a replay forks this process, so it holds
    // only the scenarios in flight).
    if (o_.engine == Engine::SimGrid) {
      for (const std::size_t i : todo) for_simgrid_.push_back({i, nullptr, {}});
    } else {
      choose_all(todo, jobs);
    }
    // 2. SimGrid, `jobs` child processes at a time, in the rows' order.
    std::sort(for_simgrid_.begin(), for_simgrid_.end(), [](const Deferred& a, const Deferred& b) { return a.index < b.index; });
    std::map<std::size_t, Deferred*> deferred;
    SimGridPool pool(jobs);
    for (auto& d : for_simgrid_) {
      deferred[d.index] = &d;
      pool.add(d.index, [this, &d]() -> std::optional<sim::SimInput> {
        if (!d.scenario) {
          try {
            d.scenario = build_scenario(model_, hardware_, scenario_spec(configs_[d.index]), /*validate=*/false);
            d.choice = choose_engine(*d.scenario, Engine::SimGrid);
          } catch (const models::OutOfMemory& e) {
            finish_row(d.index, "oom", {}, e.what());
            return std::nullopt;
          }
        }
        return simgrid_input(*d.scenario, d.choice);
      });
    }
    pool.run([&](std::size_t i, const sim::SimResult* result, const std::string& error) {
      Deferred& d = *deferred.at(i);
      if (result == nullptr) {
        finish_row(i, "error", {}, error);
      } else {
        const Scenario& sc = *d.scenario;
        finish_row(i, "", models::summarize(result->timeline, sc.samples, *sc.costs, sc.program.partition, "simgrid", &sc.program), "");
        ++simgrid_;
      }
      d.scenario.reset();
      progress(todo.size());
      maybe_write(false);
    });
    for_simgrid_.clear();
    progress(todo.size());
    maybe_write(true);
    return {configs_.size(), resumed_, todo.size(), fast_.load(), simgrid_.load(), ok_.load(), oom_.load(), errors_.load()};
  }

 private:
  // A configuration SimGrid answers: its scenario and its engine choice.
  struct Deferred {
    std::size_t index;
    std::unique_ptr<Scenario> scenario;
    EngineChoice choice;
  };

  ScenarioSpec scenario_spec(const Config& c) const {
    ScenarioSpec s;
    s.schedule = c.schedule;
    s.ranks = c.ranks;
    s.microbatches = c.microbatches;
    s.virtual_stages = virtual_of(c.schedule);
    s.batch = c.microbatches * c.microbatch_size * c.data;
    s.tensor_parallel = c.tensor;
    s.data_parallel = c.data;
    s.sequence_parallel = o_.sequence_parallel && c.tensor > 1;
    s.zero = c.data > 1 ? o_.zero : 0;
    s.reshard_after_forward = o_.reshard_after_forward || s.zero != 3;
    s.max_active_stages = s.reshard_after_forward ? 0 : o_.max_active_stages;
    s.shard_group = s.zero > 0 && o_.shard_group > 0 && o_.shard_group < c.data ? o_.shard_group : 0;
    s.recompute = c.recompute;
    s.partition = o_.partition;
    s.optimizer = o_.optimizer;
    s.collective = o_.collective;
    s.grad_bucket_mb = o_.grad_bucket_mb;
    s.grad_bucket_first_mb = o_.grad_bucket_first_mb;
    s.precision = o_.precision;
    s.context_parallel = o_.context_parallel;
    s.context_attention = o_.context_attention;
    s.expert_parallel = o_.expert_parallel;
    s.expert_tensor_parallel = o_.expert_tensor_parallel;
    return s;
  }

  // choose() for each of `todo` on `jobs` threads; the progress and the file
  // at most every tenth of a second meanwhile, and no wait once all are chosen.
  void choose_all(const std::vector<std::size_t>& todo, int jobs) {
    // No more threads than configurations; where the system refuses one (a
    // thread limit), the ones started do the work.
    const int threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(jobs), std::max<std::size_t>(1, todo.size())));
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < threads; ++w) {
      try {
        workers.emplace_back([&] {
          for (std::size_t n; (n = next.fetch_add(1)) < todo.size();) choose(todo[n]);
        });
      } catch (const std::system_error& e) {
        if (workers.empty()) throw Error(std::string("sweep: cannot start a thread: ") + e.what());
        break;
      }
    }
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (chosen_ < todo.size()) {
        changed_.wait_for(lock, std::chrono::milliseconds(100), [&] { return chosen_ == todo.size(); });
        lock.unlock();
        progress(todo.size());
        maybe_write(false);
        lock.lock();
      }
    }
    for (auto& t : workers) t.join();
  }

  // Builds configuration i's scenario and chooses its engine: a row where the
  // fast path answers (or it cannot be built), otherwise kept for SimGrid.
  void choose(std::size_t i) {
    try {
      auto sc = build_scenario(model_, hardware_, scenario_spec(configs_[i]), /*validate=*/false);
      auto choice = choose_engine(*sc, o_.engine);
      if (choice.engine == Engine::Fast) {
        finish_row(i, "", models::summarize(choice.timeline, sc->samples, *sc->costs, sc->program.partition, "fast", &sc->program), "");
        ++fast_;
      } else {
        std::lock_guard<std::mutex> lock(mutex_);
        for_simgrid_.push_back({i, std::move(sc), std::move(choice)});
      }
    } catch (const models::OutOfMemory& e) {
      finish_row(i, "oom", {}, e.what());
    } catch (const Error& e) {
      finish_row(i, "error", {}, e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++chosen_;
    }
    changed_.notify_one();
  }

  // --virtual applies to the generators with several stages per rank; the
  // V-shaped ones (zb-v, v-half, dualpipe-v) have their own 2.
  int virtual_of(const std::string& name) const {
    for (const auto& g : schedule::generators()) {
      if (g.name == name) return g.virtual_stages ? o_.virtual_stages : std::max(1, g.fixed_stages_per_rank);
    }
    return 1;
  }

  // The row's first six columns, and its last two (T, D): the configuration.
  std::string head(const Config& c) const {
    const int v = virtual_of(c.schedule);
    return c.schedule + "," + c.recompute + "," + std::to_string(c.ranks) + "," + std::to_string(v) + "," +
           std::to_string(c.microbatches) + "," + std::to_string(c.microbatches * c.microbatch_size * c.data);
  }
  static std::string tail(const Config& c) { return std::to_string(c.tensor) + "," + std::to_string(c.data); }
  std::string key(const Config& c) const { return head(c) + "," + tail(c); }

  std::string inputs_path() const { return o_.out + ".inputs"; }

  // What every row depends on besides its key columns: the model and hardware
  // (their files' contents, hashed) and the options that are not in the row.
  // Resuming from rows computed from other inputs would mix two sweeps.
  std::string describe_inputs() const {
    const auto fnv = [](const std::string& text) {
      std::uint64_t h = 1469598103934665603ULL;
      for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
      char buf[17];
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
      return std::string(buf);
    };
    const auto file = [&](const std::string& spec) {
      std::error_code ec;
      return std::filesystem::is_regular_file(spec, ec) ? spec + " (contents " + fnv(schedule::read_file(spec)) + ")"
                                                        : spec + " (preset)";
    };
    return "model: " + file(o_.model) + "\nhardware: " + file(o_.hardware) + "\npartition: " + o_.partition +
           "\noptimizer: " + o_.optimizer + "\nengine: " + std::string(engine_name(o_.engine)) + "\nvirtual: " + std::to_string(o_.virtual_stages) +
           "\nsequence parallel: " + (o_.sequence_parallel ? "yes" : "no") + "\nzero1: " + (o_.zero == 1 ? "yes" : "no") +
           (o_.zero > 1 ? "\nzero: " + std::to_string(o_.zero) + (o_.reshard_after_forward ? "" : ", weights kept") +
                             (o_.max_active_stages > 0 ? ", UNSHARD/RESHARD " + std::to_string(o_.max_active_stages) + " active" : "")
                       : "") +
           (o_.shard_group > 0 ? "\nshard group: " + std::to_string(o_.shard_group) : "") +
           (o_.precision.empty() ? "" : "\nprecision: " + o_.precision) +
           (o_.context_parallel > 1 ? "\ncontext: " + std::to_string(o_.context_parallel) +
                                          (o_.context_attention == "all-gather" ? ", all-gather" : "") : "") +
           (o_.expert_parallel > 1 ? "\nexpert: " + std::to_string(o_.expert_parallel) +
                                         (o_.expert_tensor_parallel == 1 ? ", ETP 1" : "") : "") +
           (o_.collective == "auto" ? "" : "\ncollective: " + o_.collective) +
           (o_.grad_bucket_mb > 0 ? "\ngradient buckets: " + models::yaml_number(o_.grad_bucket_mb) + " MB" : "") +
           (o_.grad_bucket_first_mb > 0 ? ", the first " + models::yaml_number(o_.grad_bucket_first_mb) + " MB" : "") + "\ncolumns: " + kHeader + "\n";
  }

  void load_existing() {
    if (!std::filesystem::exists(o_.out)) return;
    std::istringstream in(schedule::read_file(o_.out));
    std::string line;
    if (!std::getline(in, line) || line != kHeader) {
      throw Error(o_.out + ":1: not a results file of this sweep (its header differs); choose another --out");
    }
    if (!std::filesystem::exists(inputs_path())) {
      throw Error(o_.out + ": no " + inputs_path() +
                  " beside it, so its rows cannot be told to come from this model, hardware and options; remove it or "
                  "choose another --out");
    }
    const std::string before = schedule::read_file(inputs_path());
    if (before != inputs_) {
      std::istringstream a(before), b(inputs_);
      std::string was, now;
      while (std::getline(a, was) && std::getline(b, now) && was == now) {
      }
      const auto field = now.substr(0, now.find(':'));
      if (was.empty() || field.empty()) {
        throw Error(o_.out + ": " + inputs_path() + " is empty or damaged (line '" + was +
                    "'), so its rows cannot be told to come from this model, hardware and options; remove both to "
                    "start again, or choose another --out");
      }
      throw Error(o_.out + ": its rows were computed with another " + field + " (" + inputs_path() + ": '" + was +
                  "', now '" + now + "'); remove it to start again, or choose another --out");
    }
    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < configs_.size(); ++i) index[key(configs_[i])] = i;
    for (int number = 2; std::getline(in, line); ++number) {
      if (line.empty()) continue;
      const auto cells = checked_row(line, number);
      std::string row_key = cells[0];
      for (int c = 1; c < kKeyColumns; ++c) row_key += "," + cells[c];
      row_key += "," + cells[kColumns - 2] + "," + cells[kColumns - 1];
      const auto it = index.find(row_key);
      if (it != index.end()) {
        rows_[it->second] = line;
        ready_[it->second] = true;
      } else {
        foreign_.push_back(line);
      }
    }
  }

  // A row taken back on resume must be one this command wrote: the status
  // known, the numbers numbers (an edited or damaged row would otherwise be
  // kept, and counted as done). Returns its 15 cells (the reason, the 13th,
  // may hold commas; T and D after it are whole numbers).
  std::vector<std::string> checked_row(const std::string& line, int number) const {
    std::vector<std::string> cells;
    std::size_t from = 0;
    for (int c = 0; c < 12; ++c) {
      const auto comma = line.find(',', from);
      if (comma == std::string::npos) break;
      cells.push_back(line.substr(from, comma - from));
      from = comma + 1;
    }
    std::string rest = line.substr(from);
    std::vector<std::string> last;
    for (int c = 0; c < 2 && cells.size() == 12; ++c) {
      const auto comma = rest.rfind(',');
      if (comma == std::string::npos) break;
      last.insert(last.begin(), rest.substr(comma + 1));
      rest.erase(comma);
    }
    cells.push_back(rest);
    cells.insert(cells.end(), last.begin(), last.end());
    const auto damaged = [&](const std::string& what) {
      return Error(o_.out + ":" + std::to_string(number) + ": " + what +
                   ": not a row this sweep wrote; remove the file (or the row) to compute it again");
    };
    if (cells.size() < kColumns) {
      throw damaged("the row has " + std::to_string(cells.size()) + " columns, not " + std::to_string(kColumns));
    }
    for (int c = kColumns - 2; c < kColumns; ++c) {
      const std::string& cell = cells[c];
      if (cell.empty() || cell.find_first_not_of("0123456789") != std::string::npos || cell[0] == '0') {
        throw damaged(std::string("column '") + (c == kColumns - 2 ? "tensor" : "data") + "' is '" + cell + "'");
      }
    }
    const std::string& status = cells[6];
    if (status != "ok" && status != "oom" && status != "error") throw damaged("column 'status' is '" + status + "'");
    static const char* names[] = {"step_time_s", "throughput_samples_per_s", "bubble_fraction", "max_stage_memory_gb"};
    for (int c = 7; c <= 10; ++c) {
      const std::string& cell = cells[c];
      if (cell.empty() && status != "ok") continue;
      char* end = nullptr;
      const double x = std::strtod(cell.c_str(), &end);
      if (cell.empty() || end != cell.c_str() + cell.size() || !std::isfinite(x) || x < 0) {
        throw damaged(std::string("column '") + names[c - 7] + "' is '" + cell + "'");
      }
    }
    return cells;
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
    for (std::size_t r = 0; r < s.rank_memory.size() && why.empty(); ++r) {
      if (!s.rank_memory[r].fits()) {
        why = "rank " + std::to_string(r) + " needs " + num(s.rank_memory[r].peak_bytes / 1e9) + " GB of " +
              num(s.rank_memory[r].capacity_bytes / 1e9) + " GB for its " + std::to_string(s.rank_memory[r].stages) +
              " stages together";
      }
    }
    if (status.empty()) status = s.fits() ? "ok" : "oom";
    const bool ran = !s.busy_s.empty();
    // Counted by the status the row says: an oom row is out of memory whether
    // the partitioner refused it (not run) or its prediction overflows.
    ++(status == "ok" ? ok_ : status == "oom" ? oom_ : errors_);
    if (on_row_) {
      const Config& c = configs_[i];
      SweepRow row{c.schedule, c.recompute, c.ranks, virtual_of(c.schedule), c.microbatches,
                   c.microbatches * c.microbatch_size * c.data, c.tensor, c.data, status, ran, s.step_time_s,
                   s.throughput, s.bubble, max_memory / 1e9, s.engine, why};
      std::lock_guard<std::mutex> lock(row_mutex_);
      on_row_(row);
    }
    rows_[i] = head(configs_[i]) + "," + status + "," + (ran ? num(s.step_time_s) : "") + "," +
               (ran ? num(s.throughput) : "") + "," + (ran ? num(s.bubble) : "") + "," +
               (ran ? num(max_memory / 1e9) : "") + "," + s.engine + "," + csv_field(why) + "," + tail(configs_[i]);
    ready_[i].store(true, std::memory_order_release);
    ++completed_;
  }

  // Rewrites the whole file (finished rows only) through a rename, at most
  // every few seconds unless `final`.
  void maybe_write(bool final) {
    const auto now = std::chrono::steady_clock::now();
    if (!final && now - last_write_ < write_interval_) return;
    std::string text = std::string(kHeader) + "\n";
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      if (ready_[i].load(std::memory_order_acquire)) text += rows_[i] + "\n";
    }
    for (const auto& row : foreign_) text += row + "\n";
    schedule::write_file_atomic(o_.out, text);
    const auto took = std::chrono::steady_clock::now() - now;
    last_write_ = std::chrono::steady_clock::now();
    write_interval_ = std::max<std::chrono::steady_clock::duration>(std::chrono::seconds(2), 10 * took);
  }

  void progress(std::size_t total) {
    if (progress_) progress_(completed_.load(), total);
  }

  const SweepSpec& o_;
  std::mutex mutex_;  // guards for_simgrid_ and chosen_
  std::condition_variable changed_;
  std::vector<Deferred> for_simgrid_;
  std::size_t chosen_ = 0;
  models::Model model_;
  models::Hardware hardware_;
  std::vector<Config> configs_;
  std::vector<std::string> rows_, foreign_;
  std::unique_ptr<std::atomic<bool>[]> ready_;
  std::atomic<std::size_t> completed_{0}, fast_{0}, simgrid_{0}, ok_{0}, oom_{0}, errors_{0};
  std::size_t resumed_ = 0;
  std::string inputs_;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration write_interval_ = std::chrono::seconds(2);
  SweepProgress progress_;
  SweepRowCallback on_row_;
  std::mutex row_mutex_;  // on_row_ is called from the threads one at a time
};

}  // namespace

SweepReport run_sweep(const SweepSpec& spec, const SweepProgress& progress, const SweepRowCallback& on_row) {
  return Sweep(spec).run(progress, on_row);
}

}  // namespace pipetwin::twin
