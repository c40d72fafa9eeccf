// ZB-V (zero bubble V, Qi et al. 2024, Section 6), ported action for action
// from PyTorch 2.13's ScheduleZBVZeroBubble._calculate_single_rank_operations.
// Two stages per rank, placed V-shaped: rank r holds chunk 0 = stage r and
// chunk 1 = stage 2K-1-r, so the forward runs down the ranks and back up, and
// rank 0 holds both the first and the last stage:
//
//   rank:    0     1    ...   K-1
//   chunk 0: 0 --> 1 --> ... --> K-1
//                                 |
//   chunk 1: 2K-1 <-- 2K-2 <-- ... K
//
// PyTorch pads M to n = max(2K-1, M) micro-batches, walks the phases below
// over n, then drops every action of a padded micro-batch (its None cells);
// this port drops them as it goes. K=2, M=4:
//
//   rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 ...
//   rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 ...
#include <algorithm>

#include "schedule/error.hpp"
#include "schedule/generators.hpp"

namespace pipetwin::schedule {
namespace {

// One rank's list, with PyTorch's counters: forwards, input gradients (I)
// and weight gradients (W) issued so far on each of the rank's two chunks.
struct RankOrder {
  std::vector<Action>& actions;
  int M;         // the real micro-batches
  int stage[2];  // chunk -> stage
  int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};

  void push(Op op, int chunk, int microbatch) {
    if (microbatch < M) actions.push_back(make_action(op, stage[chunk], microbatch));
  }
  void forward(int chunk) { push(Op::F, chunk, f[chunk]++); }
  void input_grad(int chunk) { push(Op::I, chunk, b[chunk]++); }
  void weight_grad(int chunk) { push(Op::W, chunk, w[chunk]++); }
  // In warm-up and steady state PyTorch gives W the same micro-batch as the I
  // just before it; the cool-down's W counters start from there.
  void input_and_weight_grad(int chunk) {
    push(Op::I, chunk, b[chunk]);
    push(Op::W, chunk, b[chunk]++);
    w[chunk] = b[chunk];
  }
};

}  // namespace

Program generate_zb_v(const GeneratorOptions& o) {
  const int K = o.ranks, M = o.microbatches;
  const int n = std::max(2 * K - 1, M);  // PyTorch's n_micro, padded micro-batches included
  // Every rank walks n micro-batches, padded ones included: 2K x n is the
  // work, bounded as K x V x M is for every generator.
  if (2LL * K * n > kMaxStageMicrobatches) {
    throw Error("schedule zb-v: " + std::to_string(2 * K) + " stages x " + std::to_string(n) +
                " micro-batches (M padded to 2K-1, as PyTorch does) is more than the " +
                std::to_string(kMaxStageMicrobatches) + " (stage, micro-batch) pairs a schedule may hold");
  }
  Program p = make_program("zb-v", K, 2, M, o.recompute);
  for (int s = K; s < 2 * K; ++s) p.stage_to_rank[s] = RankId{2 * K - 1 - s};
  for (int r = 0; r < K; ++r) {
    RankOrder q{p.ranks[r], M, {r, 2 * K - 1 - r}};
    // 1. Warm-up: 2(K-r)-1 forwards of chunk 0.
    for (int i = 0; i < 2 * (K - r) - 1; ++i) q.forward(0);
    // 2. Warm-up: r pairs, a forward of chunk 1 then one of chunk 0.
    for (int i = 0; i < r; ++i) {
      q.forward(1);
      q.forward(0);
    }
    // 3. Warm-up: K-r times F, I, W of chunk 1.
    for (int i = 0; i < K - r; ++i) {
      q.forward(1);
      q.input_and_weight_grad(1);
    }
    // 4. Steady state: F (while any is left), I, W of chunk 0, then F, I, W of chunk 1.
    while (q.f[1] < q.f[0] || q.f[0] < n) {
      if (q.f[0] < n) q.forward(0);
      q.input_and_weight_grad(0);
      q.forward(1);
      q.input_and_weight_grad(1);
    }
    // 5. Cool-down: r pairs of input gradients, chunk 0 then chunk 1.
    for (int i = 0; i < r; ++i) {
      q.input_grad(0);
      q.input_grad(1);
    }
    // 6. Cool-down: K-r times I then a deferred W of chunk 0.
    for (int i = 0; i < K - r; ++i) {
      q.input_grad(0);
      q.weight_grad(0);
    }
    // 7. Flush: the deferred Ws of chunk 1, then those of chunk 0.
    while (q.w[1] < q.b[1]) q.weight_grad(1);
    while (q.w[0] < q.b[0]) q.weight_grad(0);
  }
  return p;
}

}  // namespace pipetwin::schedule
