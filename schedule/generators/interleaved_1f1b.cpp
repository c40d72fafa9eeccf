// Interleaved 1F1B as PyTorch 2.13 builds it (ScheduleInterleaved1F1B, its
// "flex_pp" form of Megatron-LM's schedule), and interleaved zero bubble
// (ScheduleInterleavedZeroBubble) on the same walk. Each rank holds V chunks
// (stages r, r+K, ..., r+(V-1)K); M micro-batches go in R = max(1, M / K)
// rounds of M / R (M must be a multiple of R, not of K):
//
//   step k's forward : chunk (k / (M/R)) mod V,               its next micro-batch
//   step k's backward: chunk V-1 - ((k - warm-up) / (M/R)) mod V, its next micro-batch
//
// Rank r warms up with min((V-1)·M/R + f·(K-1-r), V·M) forwards (f = 2 for
// 1F1B, 1 for zero bubble), alternates forward and backward, then drains.
// Zero bubble splits each backward into I and W and, after r I's, runs the
// oldest pending W after each I; the rest drain at the end.
// Megatron-LM's combined 1F1B (--overlap-moe-expert-parallel-comm,
// combined_1f1b.py) walks the same way with one more warm-up forward
// (schedules.py's num_warmup_microbatches += 1), and runs each steady-state
// step's forward and backward as one merged step, whose all-to-alls hide
// under the other's compute: here an OVERLAP_F_B. At K = 1 (V = 1 too:
// Megatron-LM's form without pipelining) it is F0, then F(i+1) with B(i),
// then the last B.
#include <algorithm>
#include <map>
#include <vector>


#include "schedule/generators.hpp"

namespace pipetwin::schedule {
namespace {

struct Walk {
  int K, V, M, rank, per_round, warmup;
  int forward_stage(int step) const { return ((step / per_round) % V) * K + rank; }
  int backward_stage(int step) const { return (V - 1 - ((step - warmup) / per_round) % V) * K + rank; }
};

// `combined`: Megatron-LM's combined 1F1B, one more warm-up forward and each
// steady-state step's forward and backward one OVERLAP_F_B.
Program interleaved(const GeneratorOptions& o, const char* name, bool zero_bubble, bool combined = false) {
  const int K = o.ranks, M = o.microbatches, V = o.stages_per_rank;
  const int per_round = M / std::max(1, M / K);
  Program p = make_program(name, K, V, M, o.recompute);
  for (int r = 0; r < K; ++r) {
    const int warmup = (V - 1) * per_round + (zero_bubble ? 1 : 2) * (K - 1 - r) + (combined ? 1 : 0);
    const Walk w{K, V, M, r, per_round, std::min(warmup, V * M)};
    const int total = V * M + w.warmup;  // forwards V·M, backwards V·M, some of each step paired
    const int first_w = zero_bubble ? r : 0;  // I's before the first W
    std::map<int, int> next_f, next_b, next_w;  // per stage, its next micro-batch
    std::vector<int> backward_steps;
    auto& actions = p.ranks[r];
    int weights = 0;
    const auto add_weight = [&] {
      const int s = w.backward_stage(backward_steps[weights++]);
      actions.push_back(make_action(Op::W, s, next_w[s]++));
    };
    for (int step = 0; step < total; ++step) {
      // 1. Warm-up and 2. steady state: the step's forward.
      if (step < V * M) {
        const int s = w.forward_stage(step);
        actions.push_back(make_action(Op::F, s, next_f[s]++));
      }
      if (step < w.warmup) continue;
      // 2. Steady state and 3. cool-down: the step's backward (I with zero bubble), then maybe a W.
      const int s = w.backward_stage(step);
      actions.push_back(make_action(zero_bubble ? Op::I : Op::B, s, next_b[s]++));
      actions.back().overlapped = combined && step < V * M;
      backward_steps.push_back(step);
      if (zero_bubble && step - w.warmup >= first_w) add_weight();
    }
    // 4. Flush: the Ws still pending.
    while (zero_bubble && weights < static_cast<int>(backward_steps.size())) add_weight();
  }
  return p;
}

}  // namespace

Program generate_interleaved_1f1b(const GeneratorOptions& o) { return interleaved(o, "interleaved-1f1b", false); }

Program generate_interleaved_zb(const GeneratorOptions& o) { return interleaved(o, "interleaved-zb", true); }

Program generate_combined_1f1b(const GeneratorOptions& o) { return interleaved(o, "combined-1f1b", false, true); }

}  // namespace pipetwin::schedule
