// V-Half (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS
// 2024, its V-Shape building blocks and the V-Half schedule built from them):
// two stages per rank placed V-shaped as in zb-v (rank r holds stage r and
// stage 2K-1-r), the backward split into I (the paper's B) and W. The
// building block of rank r puts micro-batch 0's
//
//   F of stage r at slot 2r,         F of stage 2K-1-r at slot 3K-2-r,
//   I of stage 2K-1-r at 3K+d+2r-1,  I of stage r at 6K+d-2-r,
//
// d = 3 where K is even, else 0 (so that no two land in one slot modulo 6),
// and repeats every 6 slots: its forwards two slots apart on the way down
// (V-Min's one) lengthen the block's lifespan to about half of 1F1B's
// activation memory and leave room for a smaller bubble than V-Min's. The authors' greedy then squeezes the repeated block
// (v_shape_greedy.cpp). Ported from their zbv_greedy.py:
// PipelineGraph.stable_pattern_v_half, then schedule_from_pattern and
// create_schedule with mem_config 'half'. K=2, M=4:
//
//   rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 0I0 3I1 3W1 3F2 0W0 0F3 0I1 3I2 ...
//   rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1I0 1W0 1F2 2F2 2I1 1I1 2W1 1F3 1W1 ...
#include "schedule/generators/v_shape_greedy.hpp"

namespace pipetwin::schedule {

Program generate_v_half(const GeneratorOptions& o) {
  const int K = o.ranks;
  const int d = K % 2 == 0 ? 3 : 0;
  std::vector<v_shape::Block> blocks;
  for (int r = 0; r < K; ++r) blocks.push_back({2 * r, 3 * K - r - 2, 3 * K + d + 2 * r - 1, 6 * K + d - r - 2});
  return v_shape::schedule_from_blocks("v-half", blocks, o);
}

}  // namespace pipetwin::schedule
