// ZB-H2 (zero bubble, Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
// 2024, Section 2.2 and Figure 3 bottom; Table 2 for its bubble and memory):
// ZB-H1's order with more warm-up forwards, so that they fill the bubble before
// the first I, and the Ws deferred further, so that they fill the tail. Rank r
// warms up with min(2(K-r)-1, M) forwards (Figure 3, K=4: 7, 5, 3, 1), then
// runs I, the W deferred by 2r micro-batches, and the next F while any is left;
// the Ws still deferred close it. Figure 3 bottom, K=4, M=8, read off:
//
//   rank 0: F0 F1 F2 F3 F4 F5 F6 I0 W0 F7 I1 W1 I2 W2 ... I7 W7
//   rank 1:    F0 F1 F2 F3 F4 I0 F5 I1 F6 I2 W0 F7 I3 W1 I4 W2 ... I7 W5 W6 W7
//   rank 3:          F0 I0 F1 I1 ... F6 I6 W0 F7 I7 W1 W2 ... W7
//
// One step with F = I = W = 1 and free transfers, M >= 2K-1: the parallelogram
// of the figure. Rank r is busy without a gap from t = r to t = 3M + r, so the
// step takes 3M + K - 1 units and every rank idles K - 1 of them (r before its
// first forward, K-1-r after its last W); that is also ZB-H1's step. The
// paper's "zero bubble" counts the inside of each rank's span only: with the
// optimizer's synchronisation replaced by its post-validation (Section 4), the
// next step's warm-up fills the triangles before and after it, which one step
// of the simulator does not model. With unequal F, I, W (M >= 2K-1), one step
// takes M(F+I+W) + (K-1)max(F, I-F, F+I-2W), and the largest idle time inside a
// rank's span is (K-1)max(0, I-F, F+I-2W): Table 2's (K-1)(F+I-2W) where
// W <= F; where I > F and W > F, rank 0's first I also waits (K-1)(I-F) for the
// I's round trip, which the table leaves out (tests/sim/test_simulator.cpp).
//
// Memory: rank r has 2K-1 micro-batches forwarded but not yet through W once
// its first W runs (its warm-up plus the 2r forwards between its Is), so every
// stage stashes min(2K-1, M) whole micro-batches in the IR's accounting. The
// paper's (2p-2i+1)M_B + (2i-2)M_W on worker i counts the 2r that have passed I
// at the smaller M_W; its peak (2p-1)M_B is stage 0's.
//
// Any M: below 2K-1 every rank's warm-up is cut to M (all forwards first), the
// schedule stays valid and the closed forms above are not claimed.
#include "schedule/generators.hpp"

namespace pipetwin::schedule {

// zb-h1's loop (zero_bubble_h) with a warm-up long enough to cover the first
// I's round trip and the Ws deferred twice as far: the parallelogram's tail.
Program generate_zb_h2(const GeneratorOptions& o) {
  return zero_bubble_h(
      "zb-h2", o, [](int K, int r) { return 2 * (K - r) - 1; }, [](int, int r) { return 2 * r; });
}

}  // namespace pipetwin::schedule
