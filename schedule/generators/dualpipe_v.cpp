// DualPipeV (DeepSeek's DualPipe folded into a V, DeepSeek-V3 report; the
// cut-in-half variant of its open-source DualPipe), ported action for action
// from PyTorch 2.13's ScheduleDualPipeV._calculate_single_rank_operations.
// Two stages per rank placed V-shaped as in zb-v (rank r holds stages r and
// 2K-1-r); M >= 2K. In its steady state each rank runs a forward of one of
// its stages overlapped with a full backward of the other (PyTorch's
// OVERLAP_F_B, its backward marked overlapped in the IR). PyTorch's runtime
// runs the two halves one after the other unless a custom overlap is
// registered, and so does the executor; the simulators time one as their
// sum less the hardware's overlap_factor times the shorter. The first half of the
// cool-down uses full backwards, the second splits them into I and W (zero
// bubble), the W of an I queued and issued in order. K=2, M=4:
//
//   rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 [0F3 3B1] [3F2 0B0] 3B2 [3F3 0B1] 3B3 0I2 0W2 0I3 0W3
//   rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 [2F2 1B0] [1F3 2B1] [2F3 1B1] 2B2 1B2 2I3 1I3 2W3 1W3
//   ([a b]: an OVERLAP_F_B in PyTorch's order)
#include <deque>
#include <map>
#include <utility>

#include "schedule/error.hpp"
#include "schedule/generators.hpp"

namespace pipetwin::schedule {
namespace {

// One rank's list with PyTorch's counters: forwards and input gradients (a
// full backward counts as an I) per stage, and the queue of W still owed.
struct RankOrder {
  std::vector<Action>& actions;
  std::map<int, int> forwards, inputs;
  std::deque<std::pair<int, int>> weights;  // (stage, micro-batch)

  void forward(int stage) { actions.push_back(make_action(Op::F, stage, forwards[stage]++)); }
  void full_backward(int stage) { actions.push_back(make_action(Op::B, stage, inputs[stage]++)); }
  void input_grad(int stage) {
    const int mb = inputs[stage]++;
    actions.push_back(make_action(Op::I, stage, mb));
    weights.emplace_back(stage, mb);
  }
  void backward(int stage, bool zero_bubble) { zero_bubble ? input_grad(stage) : full_backward(stage); }
  void weight_if_owed() {
    if (weights.empty()) return;
    actions.push_back(make_action(Op::W, weights.front().first, weights.front().second));
    weights.pop_front();
  }
  // PyTorch's OVERLAP_F_B: the forward, then the full backward overlapped with it.
  void overlap(int forward_stage, int backward_stage) {
    forward(forward_stage);
    full_backward(backward_stage);
    actions.back().overlapped = true;
  }
};

}  // namespace

Program generate_dualpipe_v(const GeneratorOptions& o) {
  const int K = o.ranks, M = o.microbatches;
  if (M < 2 * K) {
    throw Error("schedule dualpipe-v: needs at least as many micro-batches as stages (M >= 2K = " +
                std::to_string(2 * K) + "), got M=" + std::to_string(M) + " (PyTorch refuses it too)");
  }
  Program p = make_program("dualpipe-v", K, 2, M, o.recompute);
  for (int s = K; s < 2 * K; ++s) p.stage_to_rank[s] = RankId{2 * K - 1 - s};
  for (int r = 0; r < K; ++r) {
    RankOrder q{p.ranks[r], {}, {}, {}};
    const int s0 = r, s1 = 2 * K - 1 - r;
    // 1. F0: 2(K-r-1) forwards of the rank's first stage.
    for (int i = 0; i < 2 * (K - r - 1); ++i) q.forward(s0);
    // 2. F0 F1: r+1 pairs.
    for (int i = 0; i < r + 1; ++i) {
      q.forward(s0);
      q.forward(s1);
    }
    // 3. I1 W1 F1: K-r-1 times (zero bubble).
    for (int i = 0; i < K - r - 1; ++i) {
      q.input_grad(s1);
      q.weight_if_owed();
      q.forward(s1);
    }
    // 4. Main step: F0 with B1, then F1 with B0, overlapped; the last rank's
    // first F0 and B1 are not (a smaller bubble).
    for (int i = 0; i < M - 2 * K + r + 1; ++i) {
      if (i == 0 && r == K - 1) {
        q.forward(s0);
        q.full_backward(s1);
      } else {
        q.overlap(s0, s1);
      }
      q.overlap(s1, s0);
    }
    // 5. B1, then F1 with B0: K-r-1 times.
    for (int i = 0; i < K - r - 1; ++i) {
      q.full_backward(s1);
      q.overlap(s1, s0);
    }
    // 6. B1 B0: r+1 pairs, switching to I (zero bubble) halfway.
    bool zb = false;
    const int pairs = r + 1;
    for (int i = 0; i < pairs; ++i) {
      if (i == pairs / 2 && r % 2 == 1) zb = true;
      q.backward(s1, zb);
      if (i == pairs / 2 && r % 2 == 0) zb = true;
      q.backward(s0, zb);
    }
    // 7. W0 B0: K-r-1 times.
    for (int i = 0; i < K - r - 1; ++i) {
      q.weight_if_owed();
      q.backward(s0, zb);
    }
    // 8. The W still owed.
    for (int i = 0; i < r + 1; ++i) q.weight_if_owed();
  }
  return p;
}

}  // namespace pipetwin::schedule
