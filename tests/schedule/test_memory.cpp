// Memory accounting: stashed micro-batches per stage with and without recompute.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

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

TEST(Memory, ZeroBubbleFamilyPeaksPerStage) {
  // Whole micro-batches stashed (forwarded, W not yet run) on stage s, as
  // `schedule --list` states them: zb-h1 min(K, M) on every stage (the paper's
  // p M_B); zb-h2 min(2K-1, M) on every stage (stage 0's is the paper's
  // (2p-1)M_B; on rank r, 2r of them are past I and hold only M_W there);
  // zb-v min(2K-s, M) and dualpipe-v 2K-s (M >= 2K) along the V.
  for (const int K : {1, 2, 3, 4, 8}) {
    for (int M = 1; M <= 20; ++M) {
      const std::string at = " K=" + std::to_string(K) + " M=" + std::to_string(M);
      for (const auto& m : ps::account_memory(ps::generate("zb-h1", {K, M}))) {
        EXPECT_EQ(m.peak_activations, std::min(K, M)) << "zb-h1 stage " << m.stage.value << at;
      }
      for (const auto& m : ps::account_memory(ps::generate("zb-h2", {K, M}))) {
        EXPECT_EQ(m.peak_activations, std::min(2 * K - 1, M)) << "zb-h2 stage " << m.stage.value << at;
      }
      for (const auto& m : ps::account_memory(ps::generate("zb-v", {K, M}))) {
        EXPECT_EQ(m.peak_activations, std::min(2 * K - m.stage.value, M)) << "zb-v stage " << m.stage.value << at;
      }
      if (M < 2 * K) continue;  // dualpipe-v refuses it
      for (const auto& m : ps::account_memory(ps::generate("dualpipe-v", {K, M}))) {
        EXPECT_EQ(m.peak_activations, 2 * K - m.stage.value) << "dualpipe-v stage " << m.stage.value << at;
      }
    }
  }
}
