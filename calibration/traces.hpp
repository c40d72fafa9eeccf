// The traces that calibration fits on: read, checked one by one against the
// configuration each records (its otherData), and checked against each other.
//
// A trace stands alone (schedule/trace.hpp): otherData holds the model spec's
// text, the schedule, K, V, M, the micro-batch size, the recompute policy and
// the partition, so the Program it ran is regenerated here and every rank's
// actions are compared with it. Every refusal names the file, and the field,
// rank or action at fault.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "calibration/noise.hpp"
#include "models/collectives.hpp"
#include "models/model.hpp"
#include "models/partition.hpp"
#include "schedule/program.hpp"
#include "schedule/stats.hpp"
#include "schedule/trace.hpp"

namespace pipetwin::calibration {

struct TraceRun {
  std::string path;
  schedule::Trace trace;     // the timeline: one step, seconds
  std::string model_spec;    // otherData.model_spec, the YAML text
  models::Model model;       // built from it, in topological order
  schedule::Program program; // regenerated from the configuration, with its partition
  int microbatch_size = 1;
  double batch = 0;
  models::Optimizer optimizer = models::Optimizer::Adam;  // otherData.optimizer when recorded
  std::string producer;            // "pipetwin run", "pipetwin simulate", ...
  std::vector<int> threads;        // per rank (measured.ranks[].threads), empty when not recorded
  std::vector<int> host_cores;     // per rank (measured.ranks[].host_cores), 0 when not recorded
  std::vector<double> sched_slice_s;  // per rank (measured.ranks[].sched_slice_s), 0 when not recorded
  std::vector<std::string> hosts;  // per rank (measured.ranks[].host), "" when not recorded
  std::vector<double> clock_uncertainty_s;  // per rank, 0 when not recorded
  std::optional<Noise> noise;               // otherData.measured.noise, when recorded
  // The data-parallel all-reduces' algorithm the run's backend used: ring
  // where its processes recorded Gloo collectives (Gloo's all-reduce is a
  // ring), else auto (the stage costs' choice, as NCCL's tuner chooses).
  models::Collective collective = models::Collective::Auto;
  // D > 1: per REDUCE_GRAD of the step ("1REDUCE_GRAD"), where the whole data
  // group had posted it (measured.reduction_posts_s), on the timeline's time;
  // empty when not recorded (the reduction then runs from its own post).
  std::map<std::string, double> reduction_posts_s;
  // measured.ranks[].collectives[].buckets above 1: the data group all-reduced
  // the gradients in buckets during the last backward (pipetwin run
  // --grad-bucket-mb), not in one ring at REDUCE_GRAD.
  bool bucketed = false;
  // T > 1: per pipeline rank, the seconds its tensor group's members spent in
  // their collectives in the trace's step (measured.ranks[].tp_collective_s
  // at measured.representative_step, the members' mean); empty when not
  // recorded.
  std::vector<double> tp_collective_s;
  // E > 1: per process that recorded them, its expert group's all-to-alls in
  // the trace's step (measured.ranks[].all_to_all at
  // measured.representative_step): how many, their seconds from each call to
  // its wait's return, and the bytes it exchanged in all (its own rows
  // included); empty when not recorded.
  struct Exchanges {
    double calls = 0, seconds = 0, bytes = 0;
  };
  std::vector<Exchanges> all_to_all;
  // ZeRO-1 or 2 with D > 1: per process that recorded them, its STEPs' all-gathers
  // of the updated weights in the trace's step (measured.ranks[].all_gather;
  // bytes: the parts it contributed).
  std::vector<Exchanges> all_gather;
  // From the first action of the rank that holds stage 0 to the last end:
  // one step as the simulator replays it. A measured timeline's makespan is
  // longer by the time the other ranks wait, at its start, for the previous
  // step to leave stage 0 (consecutive steps overlap).
  double step_start_s = 0;
  double step_time_s = 0;
  // Mean over ranks of the share of that step not in compute (F B I W R); where
  // the run recorded every step's (measured.bubble_fractions), their median,
  // the first step left out, over bubble_steps steps (0: the one step's).
  double bubble = 0;
  int bubble_steps = 0;

  int ranks() const { return program.num_ranks; }
  // "1f1b K=2 M=4 mb=4 recompute none" (", D=2" and ", ZeRO-1" where they apply)
  std::string describe() const;
};

// The bubble of every step a run recorded (otherData.measured.bubble_fractions):
// their median over the steps the run counted (its warm-up left out:
// measured.noise.first_counted_step, or the first step alone in traces from
// before that record), and how many steps that is; nullopt when the trace
// records none. Throws pipetwin::Error naming `path`, the field and the
// index of a value that is not a fraction, or a first counted step outside
// the steps.
struct RecordedBubble {
  double median = 0;
  int steps = 0;
  std::vector<double> counted;  // the steps' bubbles themselves
};
std::optional<RecordedBubble> recorded_bubble(const nlohmann::json& meta, const std::string& path);

// Reads and checks one trace; throws pipetwin::Error naming `path`.
TraceRun load_trace_run(const std::string& path);
// The same checks on a trace already read from `path`.
TraceRun trace_run_from(schedule::Trace trace, const std::string& path);

// Checks that the runs can be fitted together: one model (the first trace's),
// one intra-op thread count. Throws pipetwin::Error naming the file that differs.
void check_together(const std::vector<TraceRun>& runs);

// The usable cores of the host the runs were measured on
// (otherData.measured.ranks[].host_cores); 0 when no trace records them.
// Throws pipetwin::Error naming two files when they differ (fit() asks only
// when the base hardware is one shared host, whose cores matter).
int recorded_host_cores(const std::vector<TraceRun>& runs);

// The scheduler slice of the host the runs were measured on
// (otherData.measured.ranks[].sched_slice_s, exec::scheduler_slice_s): the
// one every rank that records one records; 0 when none does or two differ.
double recorded_sched_slice_s(const std::vector<TraceRun>& runs);

// The median (the mean of the middle two for an even count); 0 when empty.
using schedule::median;

}  // namespace pipetwin::calibration
