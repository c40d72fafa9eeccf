// Boost.Graph: topological order of a layer DAG, and a cycle refused.
#include <gtest/gtest.h>

#include "models/layer_graph.hpp"
#include "schedule/error.hpp"

TEST(BoostGraph, TopologicalOrderOfABranchingCell) {
  // 0 -> {1, 2} -> 3 -> 4
  const auto order = pipetwin::models::topological_order(5, {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}});
  ASSERT_EQ(order.size(), 5u);
  std::vector<int> position(5);
  for (int i = 0; i < 5; ++i) position[order[i]] = i;
  EXPECT_LT(position[0], position[1]);
  EXPECT_LT(position[0], position[2]);
  EXPECT_LT(position[1], position[3]);
  EXPECT_LT(position[2], position[3]);
  EXPECT_LT(position[3], position[4]);
}

TEST(BoostGraph, CycleAndUnknownLayerAreErrors) {
  EXPECT_THROW(pipetwin::models::topological_order(3, {{0, 1}, {1, 2}, {2, 0}}), pipetwin::Error);
  EXPECT_THROW(pipetwin::models::topological_order(2, {{0, 7}}), pipetwin::Error);
}
