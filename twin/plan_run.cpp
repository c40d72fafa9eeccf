// run_plan's two passes: the timed evaluator on threads, then SimGrid for the
// best candidates that have contention, `jobs` child processes at a time.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <system_error>
#include <thread>

#include "models/contention.hpp"
#include "models/layer_graph.hpp"
#include "models/partition.hpp"
#include "models/stage_table.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "sim/simulator.hpp"
#include "twin/plan_parts.hpp"

namespace pipetwin::twin {
namespace {

class Planner {
 public:
  Planner(const PlanSpec& o, const models::Model& model, const models::Hardware& hw)
      : o_(o), model_(model), hw_(hw), rates_(model_rates(model)) {}

  // The evaluator's pass; then rounds of SimGrid for the candidates with
  // contention among the best `top_sim` (a replayed figure only falls, which
  // may bring others up), until the best `top_sim` hold none.
  void run(std::vector<Candidate>& todo) {
    const int jobs = o_.jobs > 0 ? o_.jobs : static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
    fast_pass(todo, jobs);
    for (;;) {
      std::vector<Candidate*> ranked;
      for (auto& c : todo) {
        if (c.status == "ok") ranked.push_back(&c);
      }
      std::stable_sort(ranked.begin(), ranked.end(),
                       [](const Candidate* a, const Candidate* b) { return a->samples_per_s > b->samples_per_s; });
      std::vector<Candidate*> chosen;
      for (std::size_t i = 0; i < ranked.size() && i < static_cast<std::size_t>(std::max(0, o_.top_sim)); ++i) {
        if (ranked[i]->needs_simgrid) chosen.push_back(ranked[i]);
      }
      if (chosen.empty()) break;
      for (auto* c : chosen) c->needs_simgrid = false;
      simgrid_pass(chosen, jobs);
    }
  }

 private:
  std::unique_ptr<Scenario> scenario(const Candidate& c) const {
    return build_scenario(model_, hw_, candidate_scenario(o_, c), /*validate=*/false);
  }

  void evaluate_fast(Candidate& c) const {
    try {
      const auto sc = scenario(c);
      const auto table = models::stage_table(*sc->costs, sc->hardware, sc->program);
      auto run = schedule::evaluate(sc->program, table);
      if (run.deadlocked()) throw Error("deadlock in the generated schedule");
      const bool free = models::check_contention(run.timeline, sc->program, table, sc->hardware.topology).contention_free;
      set_figures(c, *sc, run.timeline, free ? "fast" : "fast-bound", rates_);
      c.needs_simgrid = !free;
    } catch (const models::OutOfMemory& e) {
      c.status = "oom", c.reason = e.what();
    } catch (const Error& e) {
      c.status = "error", c.reason = e.what();
    }
  }

  void fast_pass(std::vector<Candidate>& todo, int jobs) const {
    const int threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(jobs), std::max<std::size_t>(1, todo.size())));
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
      for (std::size_t n; (n = next.fetch_add(1)) < todo.size();) evaluate_fast(todo[n]);
    };
    std::vector<std::thread> workers;
    for (int w = 0; w < threads; ++w) {
      try {
        workers.emplace_back(work);
      } catch (const std::system_error& e) {
        if (workers.empty()) throw Error(std::string("plan: cannot start a thread: ") + e.what());
        break;  // the ones started do the work
      }
    }
    for (auto& t : workers) t.join();
  }

  struct Running {
    Candidate* candidate;
    sim::SimProcess process;
    std::unique_ptr<Scenario> scenario;
    std::string data;
  };

  void start(Candidate* c, std::vector<Running>& running) const {
    try {
      auto sc = scenario(*c);
      const auto table = models::stage_table(*sc->costs, sc->hardware, sc->program);
      running.push_back({c, sim::start_simulation({sc->program, table, sc->hardware.topology}), std::move(sc), {}});
    } catch (const Error& e) {
      c->status = "error", c->reason = e.what();
    }
  }

  // Reads what is ready; returns true when the child has finished (EOF).
  static bool drain(Running& r) {
    char buf[1 << 16];
    const ssize_t n = ::read(r.process.fd, buf, sizeof buf);
    if (n > 0) r.data.append(buf, static_cast<std::size_t>(n));
    return n == 0 || (n < 0 && errno != EINTR);
  }

  void finish(Running& done) const {
    try {
      const auto result = sim::finish_simulation(done.process, done.data);
      set_figures(*done.candidate, *done.scenario, result.timeline, "simgrid", rates_);
    } catch (const Error& e) {
      done.candidate->status = "error", done.candidate->reason = e.what();
    }
  }

  void simgrid_pass(const std::vector<Candidate*>& chosen, int jobs) const {
    std::deque<Candidate*> todo(chosen.begin(), chosen.end());
    std::vector<Running> running;
    while (!todo.empty() || !running.empty()) {
      while (!todo.empty() && static_cast<int>(running.size()) < jobs) {
        start(todo.front(), running);
        todo.pop_front();
      }
      if (running.empty()) continue;
      std::vector<pollfd> fds;
      for (const auto& r : running) fds.push_back({r.process.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 500) < 0 && errno != EINTR) throw Error("plan: poll failed");
      for (std::size_t j = running.size(); j-- > 0;) {
        if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR)) || !drain(running[j])) continue;
        Running done = std::move(running[j]);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(j));
        finish(done);
      }
    }
  }

  const PlanSpec& o_;
  const models::Model& model_;
  const models::Hardware& hw_;
  ModelRates rates_;
};

template <typename Load>
auto load(const char* option, const std::string& value, Load f) {
  try {
    return f(value);
  } catch (const Error& e) {
    throw Error(std::string(option) + " " + value + ": " + e.what());
  }
}

// Why no candidate exists, naming the options.
Error nothing_to_plan(const PlanSpec& o) {
  return Error("--gpus " + std::to_string(o.gpus) + " and --global-batch " + std::to_string(o.global_batch) +
               ": no candidate (no split T x K x D = " + std::to_string(o.gpus) +
               " whose D x micro-batch size divides the global batch, with --microbatch-sizes, --schedules and --max-pp "
               "as given)");
}

}  // namespace

PlanResult run_plan(const PlanSpec& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.gpus < 1) throw Error("--gpus must be positive");
  if (o.global_batch < 1) throw Error("--global-batch must be positive");
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards) throw Error("--shard: I must be at least 0 and below N");
  const auto model = load("--model", o.model, [](const std::string& m) { return models::in_topological_order(models::load_model(m)); });
  const auto hw = load("--hardware", o.hardware, [](const std::string& h) { return models::load_hardware(h); });
  for (const auto& r : o.recompute) schedule::parse_recompute(r);
  models::parse_optimizer(o.optimizer);
  PlanResult result;
  result.description = describe_plan(o, model);
  result.fingerprint = plan_fingerprint(result.description);
  result.shard = o.shard;
  result.shards = o.shards;
  auto all = enumerate_candidates(o, model, hw);
  if (all.empty()) throw nothing_to_plan(o);
  result.enumerated = all.size();
  for (auto& c : all) {
    if (static_cast<int>(c.index % static_cast<std::size_t>(o.shards)) == o.shard) result.candidates.push_back(std::move(c));
  }
  Planner(o, model, hw).run(result.candidates);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace pipetwin::twin
