// A plain LibTorch training loop over the same model as `pipetwin run`
// (the same layers, data, optimizer and threads), without the schedule
// interpreter, transfers, timing or memory accounting: the baseline that
// `python -m bench exec` sets beside `pipetwin run -k 1`.
//
//   plain_loop MODEL.yaml M BATCH STEPS THREADS   -> median step time (s) on stdout
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "exec/torch_stage.hpp"
#include "exec/torch_task.hpp"
#include "models/families.hpp"
#include "models/layer_graph.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: plain_loop MODEL.yaml M BATCH STEPS THREADS\n");
    return 2;
  }
  const auto model = pipetwin::models::in_topological_order(pipetwin::models::load_model(argv[1]));
  const int m = std::stoi(argv[2]), batch = std::stoi(argv[3]), steps = std::stoi(argv[4]);
  at::set_num_threads(std::stoi(argv[5]));
  const int n = static_cast<int>(model.layers.size());
  pipetwin::exec::Stage stage(model, 0, {0, n}, true, 1, 0, at::kCPU, pipetwin::models::Optimizer::Adam, 1e-3);
  const pipetwin::exec::SyntheticTask task(model, 0, batch);
  const int b = batch / m;
  std::vector<double> times;
  for (int step = 0; step < steps; ++step) {
    const auto data = task.minibatch(step);
    const auto t0 = std::chrono::steady_clock::now();
    const int version = stage.acquire();
    const auto& params = stage.params(version);
    for (int i = 0; i < m; ++i) {
      auto loss = stage.forward({data.inputs.narrow(0, i * b, b)}, params, data.targets.narrow(0, i * b, b))[0] / m;
      loss.backward();
    }
    stage.release(version);
    stage.step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The warm-up, as pipetwin run leaves it out (exec::warmup_steps): the first
  // two steps from five on, the first alone below.
  times.erase(times.begin(), times.begin() + (times.size() >= 5 ? 2 : times.size() > 1 ? 1 : 0));
  std::nth_element(times.begin(), times.begin() + (times.size() - 1) / 2, times.end());
  std::printf("%.9f\n", times[(times.size() - 1) / 2]);
  return 0;
}
