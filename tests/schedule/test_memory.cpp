// Memory accounting: stashed micro-batches per stage with and without recompute.
#include <gtest/gtest.h>

#include "schedule/generators.hpp"
#include "schedule/memory.hpp"

namespace ps = pipetwin::schedule;

TEST(Memory, GPipeWithFullRecomputeStashesOnlyInputs) {
  const auto memory = ps::account_memory(ps::build_schedule("gpipe", {4, 8, 1, ps::RecomputePolicy::Full}));
  for (const auto& m : memory) {
    EXPECT_EQ(m.peak_inputs, 8);
    EXPECT_EQ(m.peak_activations, 1);  // one micro-batch re-materialized at a time
    EXPECT_EQ(m.peak_in_flight, 8);
  }
}

TEST(Memory, ExceptLastKeepsTheLastMicrobatchWhole) {
  const auto memory = ps::account_memory(ps::build_schedule("gpipe", {2, 4, 1, ps::RecomputePolicy::ExceptLast}));
  for (const auto& m : memory) {
    EXPECT_EQ(m.peak_inputs, 3);
    // The last micro-batch stays whole while micro-batch 0 is re-materialized.
    EXPECT_EQ(m.peak_activations, 2);
  }
}

TEST(Memory, OneFOneBWithRecomputeStashesMinKMinusSInputs) {
  const int K = 4, M = 8;
  const auto memory = ps::account_memory(ps::build_schedule("1f1b", {K, M, 1, ps::RecomputePolicy::Full}));
  for (const auto& m : memory) {
    EXPECT_EQ(m.peak_inputs, std::min(K - m.stage.value, M)) << "stage " << m.stage.value;
    EXPECT_EQ(m.peak_activations, 1);
  }
}

TEST(Memory, ZeroBubbleHoldsActivationsUntilW) {
  // Rank K-1 defers each W by K-1 micro-batches: K micro-batches in flight.
  const auto memory = ps::account_memory(ps::generate("zb-h1", {4, 8}));
  EXPECT_EQ(memory[3].peak_activations, 4);
  EXPECT_EQ(memory[0].peak_activations, 4);
}
