// The greedy that V-Half and V-Min share (Qi et al., "Pipeline Parallelism
// with Controllable Memory", NeurIPS 2024): a V-shaped building block
// repeated every 6 unit slots, then squeezed and reordered under the block's
// own peak memory. Ported from the authors' zbv_greedy.py
// (sail-sg/zero-bubble-pipeline-parallelism,
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py,
// PipelineGraph.schedule_from_pattern and the functions it calls).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "schedule/generators.hpp"

namespace pipetwin::schedule::v_shape {

// The building block of one rank: the slot (in 0..) of micro-batch 0's
// forward of chunk 0, forward of chunk 1, input gradient of chunk 1 and input
// gradient of chunk 0, in that order (the authors' types F, f, B, b); every
// later micro-batch repeats them 6 slots on.
using Block = std::array<int, 4>;

// The compute-only Program of `name` for the blocks of ranks 0..K-1
// (blocks.size() == K), V-shaped: rank r holds stage r (chunk 0) and stage
// 2K-1-r (chunk 1), the backward split into I and W.
Program schedule_from_blocks(const std::string& name, const std::vector<Block>& blocks, const GeneratorOptions& o);

}  // namespace pipetwin::schedule::v_shape
