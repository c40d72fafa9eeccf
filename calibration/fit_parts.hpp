// The parts of fit() (calibration/fit.hpp), one per concern, and what they
// hand each other; internal to calibration/. fit.cpp composes them:
//
//   fit_observations.cpp  the paced timelines' per-stage medians (compute,
//                         step) and which actions ran alone
//   fit_compute.cpp       the cold read of weights, the curves per kind and
//                         pass, compute slowed by more ranks than cores, the
//                         device's efficiencies
//   fit_step.cpp          the optimizer step
//   fit_transfers.cpp     the sender's and the receiver's costs, the link,
//                         the waits for a core with more ranks than cores
//   fit_report.cpp        the residuals, and the calibration section
//   fit_sharing.cpp       (fit_sharing, after fit(): replays) how ranks
//                         share a shared host's cores
//   fit_collectives.cpp   (fit_collectives, after fit_sharing) the
//                         data-parallel runs' collectives
//   fit_overlap.cpp       the device's overlap_factor, from the traces'
//                         OVERLAP_F_B
//
// Each part solves its least squares with calibration/least_squares.hpp.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "calibration/fit.hpp"
#include "calibration/least_squares.hpp"
#include "calibration/traces.hpp"
#include "models/hardware.hpp"
#include "models/partition.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::calibration::fitting {

// ---------------------------------------------------------------------------
// Observations (fit_observations.cpp).

struct ComputeGroup {
  const TraceRun* run = nullptr;
  int stage = 0;
  models::Pass pass = models::Pass::Forward;
  double measured = 0;  // median over the group's actions
  // Where the group is the stage's first forward in a step alone (no other
  // forward of its pass to take instead): its weight bytes, whose cold read
  // it also holds (then measured is net of it); else 0.
  double cold_bytes = 0;
  // The actions its time spans: 2 for a zero-bubble stage's I + W (a
  // backward's work with two actions' overheads).
  int actions = 1;
};

struct StepGroup {
  const TraceRun* run = nullptr;
  int stage = 0;
  double measured = 0;
};

// The compute and step observations: per stage and pass, the median of the
// actions that ran alone (another rank computing for at most 0.1% of the
// action), so that the device's curves do not depend on how ranks share the
// host. `all` takes every action instead (when too few ran alone).
struct Observations {
  std::vector<ComputeGroup> compute;
  std::vector<StepGroup> steps;
  int shared_actions = 0;  // left out
  // Each stage's first forward in a step against at least two other forwards
  // of its pass, all alone (not with `all`): its weight bytes and how much
  // longer it took than their median (the device's cold_weights_bandwidth).
  struct ColdForward {
    const TraceRun* run = nullptr;
    double bytes = 0, extra = 0;
  };
  std::vector<ColdForward> cold;
  // A stage whose backward a zero-bubble schedule ran as I and W: the
  // medians of each (their sum is also a backward row of `compute`).
  struct SplitBackward {
    const TraceRun* run = nullptr;
    int stage = 0;
    double input_grad_s = 0, weight_grad_s = 0;
  };
  std::vector<SplitBackward> split;
};
Observations compute_observations(const std::vector<TraceRun>& runs, bool all);

// Each action extended to the start of the next one on its rank: the
// bookkeeping between actions (a few microseconds each) belongs to the action
// before it, so that a replay of these durations keeps the rank's pace.
schedule::Timeline paced(const schedule::Timeline& t);

// For each compute action (F B I W R and STEP, what SimGrid runs on the
// cores), how long another rank was computing at the same time: an action
// that ran alone tells what the device does; one that shared the host also
// tells how the ranks share it (fit_sharing). Indexed like the timeline.
std::vector<std::vector<double>> concurrent_time(const schedule::Timeline& timeline);

// The configuration a run was traced with, for its StageCostModel.
models::PartitionRequest request_of(const TraceRun& run);

// Work of one layer's pass, per sample.
double pass_flops(const models::Layer& l, models::Pass pass);

// The bytes of stage s's weights in `run` (what its first forward in a step
// reads back: the device's cold_weights_bandwidth).
double weight_bytes(const TraceRun& run, int s);

// The run's intra-op threads per rank (1 when not recorded), and whether its
// ranks x threads are more than the cores of `base`, a shared host.
int threads_of(const TraceRun& run);
bool oversubscribed(const TraceRun& run, const models::Hardware& base);

// "0:3 3:6" (separator " ") or "0:3, 3:6" (", "): a partition's layer ranges.
std::string partition_text(const std::vector<schedule::LayerRange>& partition, const std::string& separator);

// The stages of a partition that never ran alone in some pass, in any run:
// the curves have no row of theirs, so the split of their time between
// their layers' kinds comes from other partitions (and, for a kind no other
// stage holds alone, from differences of stages: an error there shows in
// these stages' predictions). One note per (partition, stage).
std::vector<std::string> never_alone_notes(const Observations& alone, const Observations& every, const models::Model& model);

// ---------------------------------------------------------------------------
// What every part reads (fit.cpp).

struct Inputs {
  const std::vector<TraceRun>& runs;
  models::Hardware base;  // the base hardware, with the cores the traces recorded (a shared host)
  // Transfers come from runs whose ranks each had a core (their sends and
  // receives are not delayed waiting for one), unless there are none.
  std::vector<const TraceRun*> unshared;
  bool all_shared = false;
  // Whether the run had more ranks x threads than the host's cores.
  bool shared(const TraceRun& run) const { return oversubscribed(run, base); }
  bool transfers_from(const TraceRun& run) const;
};

// Every parameter of a solved problem, as the coefficients the file records.
void record(std::vector<Coefficient>& into, const Problem& prob, const Solution& sol);

// ---------------------------------------------------------------------------
// Compute (fit_compute.cpp).

// Per pass: each kind's (seconds per FLOP, seconds per layer): the time of
// one layer invocation, affine in its work w = FLOPs x micro-batch size;
// the action's overhead; the fastest FLOP/s a kind reached; the fit's loss
// (Huber at 5% on relative residuals).
struct ComputeFit {
  std::map<models::Pass, std::map<std::string, std::pair<double, double>>> curves;
  std::map<models::Pass, double> action;
  std::map<models::Pass, double> stream;  // seconds per byte of a stage's weights (Device::weight_stream)
  std::vector<Coefficient> coefficients;
  double fastest = 0;
  double loss = 0;
};

// The curves on `obs`'s compute groups: one robust problem per pass (the
// forward's with the recompute's rows), slopes tied to the largest kind's
// where the traces cannot tell them apart, overheads kept >= 0.
// `pooled`: every layer counted under kinds[0] (one curve for all kinds).
// `stream`: the weights' seconds per byte per pass, taken as given (the
// pooled fit takes the per-kind fit's); else fitted (not pooled).
ComputeFit fit_compute(const Observations& obs, const std::vector<std::string>& kinds, double base_peak,
                       bool pooled = false, const std::map<models::Pass, double>* stream = nullptr);

// A compute group's time as a fit's curves give it (its row of fit_compute's
// problem: the action's overhead, and per layer with work a w + b, and its
// weights' streaming).
double group_seconds(const ComputeFit& cf, const ComputeGroup& g);

// The model's layer kinds, by total work (largest first).
std::vector<std::string> kinds_by_work(const models::Model& model);

// What the compute part hands on: the curves, the observations they were
// fitted on (steps divided by 1 + slower in runs with more ranks than cores)
// and as measured (for the residuals), the first forward's seconds per
// weight byte, and how much slower compute ran with more ranks than cores.
struct Curves {
  std::vector<std::string> kinds;  // in the order of the model's total work
  ComputeFit fit;
  ComputeFit pooled;  // every kind under kDefaultKind, for the kinds of other models
  Observations observed, as_measured;
  double cold_s_per_byte = 0;
  double slower = 0, slower_action_s = 0;  // topology.oversubscribed_compute and oversubscribed_action_s
};

// The cold weights (device.cold_weights_bandwidth), the curves from the
// actions that ran alone, and the compute slowdown with more ranks than
// cores; adds their coefficients and notes to `result`.
Curves fit_curves(const Inputs& in, double base_peak, models::Device& device, FitResult& result);

// The device's kinds and action overheads from the curves (the peak raised
// to the fastest kind); throws pipetwin::Error when the traces hold no
// forward or no backward.
void set_device_curves(Curves& c, double base_peak, models::Precision precision, models::Device& device,
                       std::vector<std::string>& notes);

// ---------------------------------------------------------------------------
// The optimizer step (fit_step.cpp).

// STEP = step_overhead + traffic / memory_bandwidth on `steps` (robust, on
// relative errors): sets device.step_overhead_s and memory_bandwidth (kept
// when every stage updates as many parameters, or the slope is not
// positive) and adds the coefficients, or a note when there are no steps.
void fit_step(const std::vector<StepGroup>& steps, const models::Hardware& base, models::Device& device, FitResult& result);

// ---------------------------------------------------------------------------
// The backward's two halves (fit_split.cpp).

// Where traces ran I and W apart: each kind's weight_grad_share, W's share of
// the backward on its fitted curve, by least squares over the stages (W less
// its action's overhead = sum over kinds of share x the kind's backward
// seconds in the stage); adds the coefficients, or nothing without such
// stages.
void fit_weight_grad_share(const std::vector<Observations::SplitBackward>& split, models::Device& device,
                           FitResult& result);

// ---------------------------------------------------------------------------
// Transfers (fit_transfers.cpp).

// The transfers of one (sender stage, direction): what their sends took,
// and their receives relative to the end of the matching send.
struct Receive {
  double start = 0, end = 0;  // after the send's end (negative: posted before)
  double uncertainty = 0;     // of the two ranks' aligned clocks
};
struct LinkGroup {
  const TraceRun* run = nullptr;
  int stage = 0;    // the sender
  bool forward = true;
  double bytes = 0;
  double send = 0;  // median SEND
  std::vector<double> sends;  // every SEND
  std::vector<Receive> receives;
  // Receives that were waiting when the message was sent: end (latency +
  // bytes / bandwidth + the receiver's cost); those that started after it had
  // arrived: duration (the receiver's cost). Medians; count 0 when none.
  double flight = 0, take = 0;
  int waited = 0, arrived = 0;
};

// Per run, per (sender stage, direction), from the paced timelines; the
// bytes from the model's cut (a StageCostModel on `base`).
std::vector<LinkGroup> link_groups(const std::vector<TraceRun>& runs, const models::Hardware& base);

// A note when some runs had more ranks x threads than the host's cores
// (their transfers are not fitted).
void note_unfitted_transfers(const Inputs& in, std::vector<std::string>& notes);

// The sender's cost (device.transfer_overhead_s, send_bandwidth), the link
// (the returned topology's intra link) in two passes around the receiver's
// cost (device.recv_overhead_s, recv_bandwidth), and on a shared host with
// runs of more ranks than cores the waits for a core (and `slower`, the
// compute's); sets the groups' waited, flight, arrived and take; adds the
// coefficients and notes to `result`.
models::Topology fit_transfers(const Inputs& in, std::vector<LinkGroup>& links, double slower, double slower_action_s,
                               models::Device& device, FitResult& result);

// ---------------------------------------------------------------------------
// The report (fit_report.cpp).

// Every group (compute and step as measured, with the first forwards' cold
// reads; sends, transfers and receives) against result.hardware, the
// calibrated hardware: into result.residuals and overall, or for the runs
// with more ranks than cores (unless all are) into shared_core_residuals.
void add_residuals(const Inputs& in, const Observations& as_measured, const std::vector<LinkGroup>& links,
                   double cold_s_per_byte, FitResult& result);

// A note per coefficient that was not fitted (tied, fixed, bounded, kept).
void note_not_fitted(FitResult& result);

// ---------------------------------------------------------------------------
// Sharing (fit_sharing.cpp).

// Golden-section search of the minimum of f on [lo, hi] to `tolerance`; the
// ends too (the optimum may be the boundary: no sharing to fit).
double golden_min(const std::function<double(double)>& f, double lo, double hi, double tolerance);

// The same where f may have several local minima (a replay's step times move
// in steps as the cores change hands): f at `points` evenly spaced points of
// [lo, hi], ends included, then the golden-section search between the best
// one's neighbours; the best of all it evaluated (and f there, in `least`).
// Each search evaluates f once at each point it visits.
double scan_min(const std::function<double(double)>& f, double lo, double hi, double tolerance, int points,
                double* least = nullptr);

// With more ranks than cores, and the way of sharing them as the topology
// holds it: the cores' worth of compute that the ranks computing at once get
// (topology.oversubscribed_cores) and the scale of the transfers' waits for a
// core (of oversubscribed_send_s and _recv_s as they are) that replay
// `beyond`'s steps and bubbles best: a grid from the capacity within the
// cores down to three quarters of it in steps of 2.5%, the waits' best scale
// at each. Kept where the replays improve on the capacity within the cores;
// otherwise the topology is left as it was. Returns whether it was kept.
// fit_sharing() does the same after choosing the way, then chooses the way
// again at the capacity found (and searches the grid again if it changed).
bool fit_oversubscribed_cores(const std::vector<const TraceRun*>& beyond, FitResult& fit, const Replay& replay);

// With the way of sharing as `fit`'s topology holds it: the share of
// topology.oversubscribed_compute (as the lone actions measured it) among 0,
// 1/4, 1/2, 3/4 and 1, with the waits' best scale at each, that replays
// `beyond`'s steps and bubbles best (set to them). Returns the share.
// fit_sharing() does the same after choosing the way.
double fit_compute_share(const std::vector<const TraceRun*>& beyond, FitResult& fit, const Replay& replay);

// ---------------------------------------------------------------------------
// The overlap of an OVERLAP_F_B (fit_overlap.cpp).

// Sets device.overlap_factor from the OVERLAP_F_B the runs' programs hold
// (their spans against their halves' durations alone), with a note and a
// coefficient; leaves it as it is where they hold none (saying so when it is not 0).
void fit_overlap(const std::vector<TraceRun>& runs, models::Device& device, FitResult& result);

}  // namespace pipetwin::calibration::fitting
