// Looped BFS (breadth-first pipeline parallelism, Lamy-Poirier 2023), as
// PyTorch 2.13's ScheduleLoopedBFS builds it: each rank holds V chunks
// (stages r, r+K, ..., r+(V-1)K) and runs every micro-batch through one chunk
// before the next: all forwards chunk by chunk, then all backwards, last
// chunk first, micro-batches in reverse.
//
//   rank 0 (K=2, V=2, M=2): 0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0
#include "schedule/generators.hpp"

namespace pipetwin::schedule {

Program generate_looped_bfs(const GeneratorOptions& o) {
  const int K = o.ranks, M = o.microbatches, V = o.stages_per_rank;
  Program p = make_program("looped-bfs", K, V, M, o.recompute);
  for (int r = 0; r < K; ++r) {
    auto& actions = p.ranks[r];
    // 1. Forwards: chunk by chunk, every micro-batch.
    for (int chunk = 0; chunk < V; ++chunk) {
      for (int mb = 0; mb < M; ++mb) actions.push_back(make_action(Op::F, chunk * K + r, mb));
    }
    // 2. Backwards: the last chunk first, micro-batches in reverse.
    for (int chunk = V - 1; chunk >= 0; --chunk) {
      for (int mb = M - 1; mb >= 0; --mb) actions.push_back(make_action(Op::B, chunk * K + r, mb));
    }
  }
  return p;
}

}  // namespace pipetwin::schedule
