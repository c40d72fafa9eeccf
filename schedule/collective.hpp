// The collectives that a group of ranks runs, each one operation done by one
// algorithm: the IR's names for them. Each one's closed form and message
// pattern are a row of models/collectives.cpp, its call in the executor a
// case of exec/torch_collectives.cpp.
#pragma once

namespace pipetwin::schedule {

enum class CollectiveAlgorithm {
  RingAllReduce,      // 2(n-1) rounds around a ring, bytes / n each
  TreeAllReduce,      // reduce up a binary tree, broadcast down, in chunks
  RingReduceScatter,  // n-1 rounds around a ring (ZeRO-1's gradients)
  RingAllGather,      // n-1 rounds around a ring (ZeRO-1's weights)
  AllToAll,           // every pair exchanges bytes / n, all at once (expert parallelism's tokens)
};

}  // namespace pipetwin::schedule
