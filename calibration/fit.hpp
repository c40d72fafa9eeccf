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
//             (Curves given as points, hardware files allow, are not fitted:
//             with the micro-batch sizes a few runs hold, knots per size were
//             less robust than one line per kind, and no more accurate.)
//   step      STEP = step_overhead + traffic / memory_bandwidth, traffic the
//             optimizer's bytes per parameter (StageCostModel::step_s).
//   transfers the sender's cost (transfer_overhead + bytes / send_bandwidth:
//             a send that writes its data itself holds the transfer); the
//             receiver's cost of taking a message that is there (receives
//             that started after their message arrived: recv_overhead +
//             bytes / recv_bandwidth); and the link: for each receive that was
//             already waiting when its send ended, long enough for its own
//             cost to have run out (a receive that waits spends that cost
//             while it waits, and ends with its message), recv end - send end
//             = latency + bytes / bandwidth (bytes from the model's cut; clocks
//             aligned by pipetwin run).
//   alone     the compute fits read only the actions that ran alone (no
//             other rank computing for more than 0.1% of the action), so that
//             the device's curves do not depend on how ranks share a host;
//             every action when some pass has none alone.
//   sharing   (fit_sharing, shared-host) how ranks computing at once share
//             the cores: effective_cores (ranks within the cores slow each
//             other: caches, memory, SMT), from the step times of the
//             runs, replayed in the simulator; with more ranks than cores,
//             what each send and receive waits for a core (the mean excess of
//             those runs' transfers, scaled to their step times). Transfers are fitted from runs
//             with no more ranks x threads than cores, unless there are none;
//             the other runs' residuals are reported apart.
//
// Each of these is a part of its own (calibration/fit_parts.hpp, a file
// each), and every least-squares problem is solved by
// calibration/least_squares.hpp.
#pragma once

#include <functional>
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

// Replays one traced configuration (its schedule, shape and partition) on a
// hardware and returns the predicted timeline: the simulator, which
// calibration/ does not link (the CLI passes it).
using Replay = std::function<schedule::Timeline(const TraceRun& run, const models::Hardware& hardware)>;

// The sharing of a shared host's cores, from step times and bubbles:
// effective_cores (from the runs with more than one rank, but no more ranks x
// threads than the host's cores), then, from the runs with more, whether a
// rank keeps a core until it receives a message (run_to_completion), or
// until then or the end of a time slice while others wait (time_slice_s:
// round robin), or shares it evenly, and the scale of the transfers' waits for a core: the values whose
// replays match the measured steps and bubbles best (Huber at 5% on the
// step's relative error plus the bubble's error; golden-section search).
// Sets fit.hardware.topology's fields and adds the coefficients. Does nothing
// on other topologies.
void fit_sharing(const std::vector<TraceRun>& runs, FitResult& fit, const Replay& replay);

// The data-parallel collectives, from the runs with D > 1 (the others are
// left out; fit() and fit_sharing() read only those): each REDUCE_GRAD as the
// run's algorithm, a ring of 2(D - 1) rounds (D - 1 for ZeRO-1's
// reduce-scatter) of the stage's gradient bytes / D, each round latency +
// chunk / bandwidth: the topology's `collective` link, by robust least squares
// on the per-(run, stage) medians of the reductions that ran alone (no other
// rank of the trace computing, stepping or reducing for more than 0.1% of it; all of them
// where none did), each timed from where the whole data group had posted it
// (TraceRun::reduction_posts_s). On a shared host a round's bytes are one
// core's work beside the ranks' (models::Topology::collective). Adds the
// coefficients, notes and the reduce_grad residuals: every reduction against
// its `replay` on the result. Does nothing without data-parallel runs.
//
// The tensor-parallel runs' (T > 1) collectives, inside their F, B and R:
// where each run recorded its ranks' seconds in them (TraceRun::tp_collective_s),
// the topology's `tensor_collective` link by robust least squares on those
// (run, rank) totals, each linear in the link's latency and seconds per byte
// (`tensor_share` at (1 s, 0) and (0, 1 s/B) gives a row's coefficients);
// else its latency on the T > 1 runs' replayed steps (golden-section search),
// the bytes' rate the data-parallel rounds'. Adds the tp_collectives residuals.
using TensorShare = std::function<std::vector<double>(const TraceRun& run, const models::Hardware& hardware)>;
void fit_collectives(const std::vector<TraceRun>& runs, FitResult& fit, const Replay& replay,
                     const TensorShare& tensor_share = {});

// The calibration section of the output file: what it was fitted on (files
// and configurations) and the residuals. `predicted_step_s`, when given, holds
// the calibrated simulator's step time for each run (same order).
std::string calibration_yaml(const FitResult& fit, const std::vector<TraceRun>& runs,
                             const std::vector<double>& predicted_step_s = {},
                             const std::vector<std::string>& engines = {});

}  // namespace pipetwin::calibration
