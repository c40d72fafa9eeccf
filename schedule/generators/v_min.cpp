// V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS
// 2024, its V-Shape building blocks and the V-Min schedule built from them):
// two stages per rank placed V-shaped as in zb-v (rank r holds stage r and
// stage 2K-1-r), the backward split into I (the paper's B) and W. The
// building block of rank r puts micro-batch 0's
//
//   F of stage r at slot r,          F of stage 2K-1-r at slot 2K-1-r,
//   I of stage 2K-1-r at 2K+d+r,     I of stage r at 4K+d-1-r,
//
// d = 2 where 3 divides K, else 0 (so that no two land in one slot modulo 6),
// and repeats every 6 slots: the shortest lifespan a V-shaped block allows,
// about a third of 1F1B's activation memory. The authors' greedy then
// squeezes the repeated block (v_shape_greedy.cpp). Ported from their
// zbv_greedy.py: PipelineGraph.stable_pattern_v_min, then
// schedule_from_pattern and create_schedule with mem_config 'min'. K=2, M=4:
//
//   rank 0: 0F0 0F1 3F0 3I0 3W0 0I0 0W0 3F1 3I1 3W1 0F2 0I1 0W1 3F2 3I2 3W2 ...
//   rank 1: 1F0 2F0 2I0 1I0 1F1 2F1 2W0 1W0 2I1 1I1 1F2 2F2 2W1 1W1 2I2 1I2 ...
#include "schedule/generators/v_shape_greedy.hpp"

namespace pipetwin::schedule {

Program generate_v_min(const GeneratorOptions& o) {
  const int K = o.ranks;
  const int d = K % 3 == 0 ? 2 : 0;
  std::vector<v_shape::Block> blocks;
  for (int r = 0; r < K; ++r) blocks.push_back({r, 2 * K - 1 - r, 2 * K + d + r, 4 * K + d - 1 - r});
  return v_shape::schedule_from_blocks("v-min", blocks, o);
}

}  // namespace pipetwin::schedule
