// The calibration fit: from traces (calibration/traces.hpp) to a hardware
// profile (models/hardware.hpp) whose StageCostModel reproduces them.
//
// What is fitted, each by least squares (Eigen), on per-stage medians of the
// step's actions (robust to the odd slow action). Each action runs until the
// next one on its rank starts: the bookkeeping between two actions belongs to
// the one before, so that the replay keeps each rank's pace.
//
//   compute   per layer kind k and pass p (forward, backward, forward_nograd,
//             recompute), the time of one layer invocation is affine in its
//             work w = FLOPs x micro-batch size: t = a_kp w + b_kp, and a stage
//             action adds c_p once (action_overhead). A stage's action is the
//             sum over its layers, so traces with different partitions and
//             micro-batch sizes separate the kinds:
//               F(stage) = c_F + sum_k (a_kF W_k + b_kF n_k)
//             Then eff_kp(w) = max w / (w + half) with max = 1 / (a_kp peak),
//             half = b_kp / a_kp (the device's peak is raised when a kind runs
//             faster than it). Coefficients that these traces cannot tell
//             apart are tied or fixed (a kind's slope to the largest kind's,
//             overheads to 0) and listed in the notes; overheads are kept >= 0.
//   step      STEP = step_overhead + traffic / memory_bandwidth, traffic the
//             optimizer's bytes per parameter (StageCostModel::step_s).
//   transfers the sender's cost (transfer_overhead, the median SEND); the
//             receiver's cost of taking a message that is there (receives
//             that started after their message arrived: recv_overhead +
//             bytes / recv_bandwidth); and the link: for each receive that was
//             already waiting when its send was posted, recv end - send end =
//             latency + bytes / bandwidth + the receiver's cost (bytes from the
//             model's cut; clocks aligned by pipetwin run).
//   sharing   in runs with more ranks x threads than the host has cores
//             (shared-host), each compute action counts for what it would
//             have taken alone: its span integrated over its rank's share of
//             the cores, min(1, cores / (threads x ranks computing)) - the
//             fair sharing that the simulator replays (SimGrid's multi-core
//             host), inverted. Their residuals are reported apart, so that
//             what sharing costs beyond a fair share shows there. Their
//             transfers are fitted only when no other run has any.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "calibration/traces.hpp"
#include "models/hardware.hpp"

namespace pipetwin::calibration {

struct ResidualStats {
  int count = 0;
  double rms_s = 0, max_s = 0;     // absolute, predicted - measured
  double rms_rel = 0, max_rel = 0; // relative to the measured value
  void add(double predicted, double measured);
  void finish();
 private:
  double sum_sq_ = 0, sum_sq_rel_ = 0;
};

// One coefficient as fitted (seconds, or seconds per FLOP / per byte).
struct Coefficient {
  std::string name;   // "transformer_block.forward.slope_s_per_flop", "action.backward_s", ...
  double value = 0;
  std::string how;    // "fitted", "fixed to 0: ...", "tied to ...", "bounded ..."
};

struct FitResult {
  models::Hardware hardware;                       // the calibrated profile
  std::vector<Coefficient> coefficients;           // raw a, b, c and link terms
  std::map<std::string, ResidualStats> residuals;  // per op kind (forward, backward, ..., step, send, transfer)
  ResidualStats overall;                           // every compute, step and transfer group
  std::map<std::string, ResidualStats> shared_core_residuals;  // runs whose ranks shared cores, per op kind
  std::vector<std::string> notes;                  // what could not be fitted, and what was kept from the base
  int observations = 0;                            // per-stage median groups used
};

// Fits `runs` (checked with check_together) starting from `base`: fields that
// the traces say nothing about (memory capacity, peak FLOP/s unless exceeded,
// topology kind and cores) are kept from it.
FitResult fit(const std::vector<TraceRun>& runs, const models::Hardware& base);

// The calibration section of the output file: what it was fitted on (files
// and configurations) and the residuals. `predicted_step_s`, when given, holds
// the calibrated simulator's step time for each run (same order).
std::string calibration_yaml(const FitResult& fit, const std::vector<TraceRun>& runs,
                             const std::vector<double>& predicted_step_s = {},
                             const std::vector<std::string>& engines = {});

}  // namespace pipetwin::calibration
