// Simulated actions per wall-clock second, for 1f1b at K=8, M=32 and at
// GPipe's largest partition count, K=128, M=512, on the same input:
//   BM_Simulate      the SimGrid replay (a child process per simulation, as the CLI runs it)
//   BM_FastPath      the timed evaluator (schedule/dry_run.hpp), in this process, one core
//   BM_FastPathAuto  the evaluator plus the contention check that `--engine auto` runs
#include <benchmark/benchmark.h>

#include "models/contention.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;

namespace {

pipetwin::sim::SimInput input(int K, int M) {
  pipetwin::sim::SimInput in;
  in.program = ps::build_schedule("1f1b", {K, M});
  in.topology.kind = pipetwin::models::TopologyKind::AllToAll;
  in.topology.intra = {5e-6, 25e9};
  ps::StageCosts c;
  c.forward_s = 1e-3, c.input_grad_s = 1e-3, c.weight_grad_s = 1e-3, c.backward_s = 2e-3, c.step_s = 1e-4;
  c.activation_bytes = c.gradient_bytes = 1e6;
  c.activation_transfer_s = c.gradient_transfer_s = in.topology.intra.seconds(1e6);  // what SimGrid takes for 1e6 bytes
  in.stages.assign(in.program.num_stages(), c);
  return in;
}

void count(benchmark::State& state, const pipetwin::sim::SimInput& in) {
  state.counters["actions"] = static_cast<double>(in.program.num_actions());
  state.counters["actions/s"] = benchmark::Counter(static_cast<double>(in.program.num_actions()) * state.iterations(),
                                                   benchmark::Counter::kIsRate);
}

}  // namespace

static void BM_Simulate(benchmark::State& state) {
  const auto in = input(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(pipetwin::sim::simulate(in));
  count(state, in);
}

static void BM_FastPath(benchmark::State& state) {
  const auto in = input(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) benchmark::DoNotOptimize(ps::evaluate(in.program, in.stages));
  count(state, in);
}

static void BM_FastPathAuto(benchmark::State& state) {
  const auto in = input(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  bool free = false;
  for (auto _ : state) {
    const auto run = ps::evaluate(in.program, in.stages);
    free = pipetwin::models::check_contention(run.timeline, in.program, in.stages, in.topology).contention_free;
    benchmark::DoNotOptimize(free);
  }
  count(state, in);
  state.counters["contention_free"] = free;
}

BENCHMARK(BM_Simulate)->Args({8, 32})->Args({128, 512})->ArgNames({"K", "M"})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FastPath)->Args({8, 32})->Args({128, 512})->ArgNames({"K", "M"})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_FastPathAuto)->Args({8, 32})->Args({128, 512})->ArgNames({"K", "M"})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
