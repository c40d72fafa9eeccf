// Throughput of the schedule toolchain: generate + lower, validate (which
// includes the dry run), in actions per second.
#include <benchmark/benchmark.h>

#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/validate.hpp"

namespace ps = pipetwin::schedule;

static void BM_Build(benchmark::State& state, const char* name) {
  const int K = static_cast<int>(state.range(0)), M = static_cast<int>(state.range(1));
  std::size_t actions = 0;
  for (auto _ : state) {
    auto p = ps::build_schedule(name, {K, M});
    actions += p.num_actions();
    benchmark::DoNotOptimize(p);
  }
  state.counters["actions/s"] = benchmark::Counter(static_cast<double>(actions), benchmark::Counter::kIsRate);
}

static void BM_DryRun(benchmark::State& state, const char* name) {
  const int K = static_cast<int>(state.range(0)), M = static_cast<int>(state.range(1));
  const auto p = ps::build_schedule(name, {K, M});
  for (auto _ : state) benchmark::DoNotOptimize(ps::dry_run(p));
  state.counters["actions/s"] = benchmark::Counter(static_cast<double>(p.num_actions()) * state.iterations(),
                                                   benchmark::Counter::kIsRate);
}

static void BM_Validate(benchmark::State& state, const char* name) {
  const int K = static_cast<int>(state.range(0)), M = static_cast<int>(state.range(1));
  const auto p = ps::build_schedule(name, {K, M});
  for (auto _ : state) benchmark::DoNotOptimize(ps::validate(p));
  state.counters["actions/s"] = benchmark::Counter(static_cast<double>(p.num_actions()) * state.iterations(),
                                                   benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Build, 1f1b, "1f1b")->ArgsProduct({{8, 32}, {64, 256}})->ArgNames({"K", "M"});
BENCHMARK_CAPTURE(BM_DryRun, 1f1b, "1f1b")->ArgsProduct({{8, 32}, {64, 256}})->ArgNames({"K", "M"});
// The fast path at GPipe's largest partition count (compare bench_sim's SimGrid figure).
BENCHMARK_CAPTURE(BM_DryRun, 1f1b, "1f1b")->Args({128, 512})->ArgNames({"K", "M"});
BENCHMARK_CAPTURE(BM_Validate, 1f1b, "1f1b")->ArgsProduct({{8, 32}, {64, 256}})->ArgNames({"K", "M"});

BENCHMARK_MAIN();
