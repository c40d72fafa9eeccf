// Simulated actions per wall-clock second of the SimGrid replay (a child
// process per simulation, as the CLI runs it), for 1f1b at K=8, M=32 and at
// GPipe's largest partition count, K=128, M=512.
#include <benchmark/benchmark.h>

#include "schedule/generators.hpp"
#include "sim/simulator.hpp"

namespace ps = pipetwin::schedule;

static void BM_Simulate(benchmark::State& state) {
  const int K = static_cast<int>(state.range(0)), M = static_cast<int>(state.range(1));
  pipetwin::sim::SimInput in;
  in.program = ps::build_schedule("1f1b", {K, M});
  ps::StageCosts c;
  c.forward_s = 1e-3, c.input_grad_s = 1e-3, c.weight_grad_s = 1e-3, c.backward_s = 2e-3, c.step_s = 1e-4;
  c.activation_bytes = c.gradient_bytes = 1e6;
  in.stages.assign(in.program.num_stages(), c);
  in.topology.kind = pipetwin::models::TopologyKind::AllToAll;
  in.topology.intra = {5e-6, 25e9};
  for (auto _ : state) benchmark::DoNotOptimize(pipetwin::sim::simulate(in));
  state.counters["actions"] = static_cast<double>(in.program.num_actions());
  state.counters["actions/s"] = benchmark::Counter(static_cast<double>(in.program.num_actions()) * state.iterations(),
                                                   benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Simulate)->Args({8, 32})->Args({128, 512})->ArgNames({"K", "M"})->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
