// run_plan's two passes: the timed evaluator on threads, then SimGrid for the
// best candidates that have contention, `jobs` child processes at a time.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "models/layer_graph.hpp"
#include "models/partition.hpp"
#include "schedule/error.hpp"
#include "twin/engine.hpp"
#include "twin/plan_parts.hpp"
#include "twin/simgrid_pool.hpp"

namespace pipetwin::twin {
namespace {

class Planner {
 public:
  Planner(const PlanSpec& o, const models::Model& model, const models::Hardware& hw, const PlanObserver& observer)
      : o_(o), model_(model), hw_(hw), rates_(model_rates(model)), observer_(observer) {}

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
  // A candidate SimGrid may replay: its scenario, built once, and its engine choice.
  struct Kept {
    std::unique_ptr<Scenario> scenario;
    EngineChoice choice;
  };

  std::unique_ptr<Scenario> scenario(const Candidate& c) const {
    return build_scenario(model_, hw_, candidate_scenario(o_, c), /*validate=*/false);
  }

  // The candidate's scenario and engine choice (twin/engine.hpp); its figures
  // from the evaluator: exact where it has no contention, otherwise a bound
  // that SimGrid may replace (the scenario kept while it is among the best).
  void evaluate_fast(Candidate& c) {
    try {
      auto sc = scenario(c);
      auto choice = choose_engine(*sc, Engine::Auto);
      const bool free = choice.engine == Engine::Fast;
      // With D > 1 the evaluator leaves the reductions out: timed here in
      // closed form, so that every ranked figure counts them.
      set_figures(c, *sc, free ? choice.timeline : with_reductions(*sc, choice.table, choice.timeline),
                  free ? "fast" : "fast-bound", rates_);
      c.needs_simgrid = !free;
      if (!free && c.status == "ok") keep(c, {std::move(sc), std::move(choice)});
    } catch (const models::OutOfMemory& e) {
      c.status = "oom", c.reason = e.what();
    } catch (const Error& e) {
      c.status = "error", c.reason = e.what();
    }
  }

  // The scenarios of the best 2 x top_sim candidates that need SimGrid, by
  // the evaluator's figure: those the replay rounds are likely to take (a
  // candidate outside them that a round brings up is built again). A bound on
  // memory: a plan may hold thousands of such candidates.
  void keep(const Candidate& c, Kept kept) {
    const std::size_t cap = 2 * static_cast<std::size_t>(std::max(0, o_.top_sim));
    std::lock_guard<std::mutex> lock(mutex_);
    if (cap == 0) return;
    const Key key = key_of(c);
    if (kept_.size() >= cap) {
      if (key < kept_.begin()->first) return;  // below the worst kept
      kept_.erase(kept_.begin());
    }
    kept_.emplace(key, std::move(kept));
  }

  // Ascending from the worst: the lower throughput, then the later index (the ranking's order, reversed).
  using Key = std::pair<double, std::ptrdiff_t>;
  static Key key_of(const Candidate& c) { return {c.samples_per_s, -static_cast<std::ptrdiff_t>(c.index)}; }

  void fast_pass(std::vector<Candidate>& todo, int jobs) {
    const int threads = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(jobs), std::max<std::size_t>(1, todo.size())));
    std::atomic<std::size_t> next{0};
    std::size_t done = 0;
    const auto work = [&] {
      for (std::size_t n; (n = next.fetch_add(1)) < todo.size();) {
        evaluate_fast(todo[n]);
        std::lock_guard<std::mutex> lock(observer_mutex_);
        if (observer_.on_candidate) observer_.on_candidate(todo[n]);
        if (observer_.progress) observer_.progress(++done, todo.size());
      }
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

  void simgrid_pass(const std::vector<Candidate*>& chosen, int jobs) {
    std::map<std::size_t, std::pair<Candidate*, Kept>> replays;  // by the candidate's index
    SimGridPool pool(jobs);
    for (Candidate* c : chosen) {
      Kept k;
      if (const auto it = kept_.find(key_of(*c)); it != kept_.end()) {
        k = std::move(it->second);
        kept_.erase(it);
      } else {
        try {
          k.scenario = scenario(*c);
          k.choice = choose_engine(*k.scenario, Engine::SimGrid);
        } catch (const Error& e) {
          c->status = "error", c->reason = e.what();
          continue;
        }
      }
      auto& kept = replays.emplace(c->index, std::pair(c, std::move(k))).first->second.second;
      pool.add(c->index, [&kept] { return std::optional<sim::SimInput>(simgrid_input(*kept.scenario, kept.choice)); });
    }
    pool.run([&](std::size_t index, const sim::SimResult* result, const std::string& error) {
      auto& [c, k] = replays.at(index);
      if (result == nullptr) {
        c->status = "error", c->reason = error;
      } else {
        set_figures(*c, *k.scenario, result->timeline, "simgrid", rates_);
      }
      if (observer_.on_candidate) observer_.on_candidate(*c);
      k.scenario.reset();
    });
  }

  const PlanSpec& o_;
  const models::Model& model_;
  const models::Hardware& hw_;
  ModelRates rates_;
  const PlanObserver& observer_;
  std::mutex mutex_;           // guards kept_ during the fast pass
  std::mutex observer_mutex_;  // the observer's callbacks one at a time
  std::map<Key, Kept> kept_;  // by key_of: the evaluator's figures
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

PlanResult run_plan(const PlanSpec& o, const PlanObserver& observer) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.gpus < 1) throw Error("--gpus must be positive");
  if (o.global_batch < 1) throw Error("--global-batch must be positive");
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards) throw Error("--shard: I must be at least 0 and below N");
  check_context_attention(o.context_attention, o.context.empty() ? 1 : *std::max_element(o.context.begin(), o.context.end()));
  const auto model = load("--model", o.model, [](const std::string& m) { return models::in_topological_order(models::load_model(m)); });
  const auto hw = load("--hardware", o.hardware, [](const std::string& h) { return models::load_hardware(h); });
  for (const auto& r : o.recompute) models::parse_recompute_choice(r);
  models::parse_optimizer(o.optimizer);
  PlanResult result;
  result.prediction_error = hw.prediction_error.value_or(0);
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
  Planner(o, model, hw, observer).run(result.candidates);
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace pipetwin::twin
