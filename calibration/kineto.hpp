// torch.profiler (Kineto) traces of PyTorch's own pipelining runs, read as
// measured runs: one Chrome JSON file per rank (export_chrome_trace, or
// tensorboard_trace_handler's *.pt.trace.json.gz), the files of one run in
// one folder (torchtitan's iteration_N/rankR_trace.json).
//
// PyTorch's action-list runtime (ScheduleInterleaved1F1B,
// ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, ScheduleLoopedBFS,
// and any schedule it runs from a CSV or a pipetwin Program) labels every
// action it runs with a record_function range "PP:<action>" ("PP:0F3",
// "PP:1SEND_B0"); ScheduleGPipe labels "Forward i" and "Backward i" (each
// holding its receives, its compute and its sends). The receives themselves
// are the backend's "gloo:recv" / "nccl:recv" ranges, from their post to
// when the wait for them returned. Each labelled action occurs once per step, so the n-th
// occurrence belongs to the n-th profiled step.
//
// What an action costs its rank is attributed like this: from when the rank
// was free (the end of its previous labelled action in the step) or, for a
// compute action, when its input had arrived, whichever is later, to its
// end. The gaps between ranges (the runtime's own loop) are thus charged to
// the action after them, and a receive's wait to nobody.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/cost_table.hpp"
#include "schedule/program.hpp"
#include "schedule/timeline.hpp"
#include "schedule/trace.hpp"

namespace pipetwin::calibration {

// One labelled action of one step, on the run's clock (seconds from the
// first event of any rank).
struct KinetoAction {
  schedule::Action action;
  bool other = false;       // UNSHARD, RESHARD, REDUCE_GRAD: the runtime's, not in the Program
  std::string label;        // as the trace names it
  double start = 0, end = 0;
  double ready = -1;        // a compute action: when its input had arrived (-1: no receive)
  double cost = 0;          // attributed (above)
  // A send: when the receiver's wait for its message returned, -1 when not
  // seen; valid_flight: the receiver's consumer had begun (and so was
  // waiting) before this send ended, so that arrival - end is the flight
  // (otherwise it only bounds it).
  double arrival = -1;
  bool valid_flight = false;
};

struct KinetoRun {
  std::string path;                // the folder, or the single file
  std::vector<std::string> files;  // by rank
  std::string backend, host;
  bool labelled_transfers = false;  // "PP:" ranges (SEND/RECV apart); false: ScheduleGPipe's
  schedule::Program program;       // compute-only, in the order the ranks ran (step 0)
  // [step][rank]: the step's labelled actions in the order they started.
  std::vector<std::vector<std::vector<KinetoAction>>> steps;
  // Each step from the first action of the rank that holds stage 0 to the
  // last end of any rank (as the simulator times one step).
  std::vector<double> step_times_s;
  // Samples per micro-batch (the step's batch / M) where the caller knows
  // the batch; 0 where not (the fit then needs every run at one M).
  double samples_per_microbatch = 0;
  // samples_per_microbatch = batch / M; throws, naming the run, where the
  // batch does not split into M micro-batches of whole samples.
  void set_batch(int batch);
  int num_steps() const { return static_cast<int>(steps.size()); }
  // When step `step` began: the first action of the rank that holds stage 0.
  double step_start_s(int step) const;
  // One step as a pipetwin Timeline (seconds from that step's start; a
  // compute action from when its input had arrived); the runtime's own
  // actions (UNSHARD, ...) left out.
  schedule::Timeline timeline(int step) const;
  // "K=2 V=2 M=8, 3 steps (ScheduleInterleaved1F1B-like: PP: ranges, gloo)"
  std::string describe() const;
};

// True when the file's first bytes look like a torch.profiler trace
// (schemaVersion, distributedInfo or deviceProperties at its top level) and
// not like one of pipetwin's own traces.
bool is_kineto_file(const std::string& path);

// One run from its files (one per rank, any order; a folder is read for its
// *.json files). Throws pipetwin::Error naming the file, the rank, the step
// or the label at fault, and what is missing (no distributedInfo, no
// labelled actions, a step cut short, CUDA kernels, ranks on two hosts).
// `batch` > 0: the samples of its step (set_batch).
KinetoRun read_kineto_run(const std::string& path, int batch = 0);

// The cost table that torch.profiler runs of one model and partition give:
// per stage the mean attributed cost of its F, B, I and W (the first
// forward of a step apart, as first_forward_extra_s), of posting a send and a
// receive, and the runtime's own actions per step (UNSHARD, RESHARD,
// REDUCE_GRAD) as step_s; per cut the mean flight of the messages whose
// receiver was waiting before they were sent. Where the runs' micro-batches
// are of two or more sizes (samples_per_microbatch), each time is fitted per
// sample instead (least squares over the sizes' means: fixed + per sample
// x size, neither negative), and the table times any size. Every run must
// have the same stages; throws pipetwin::Error naming the run that differs, or the stage
// that no run timed an action of.
struct KinetoFit {
  models::CostTable table;
  struct Stage {
    int forwards = 0, backwards = 0, input_grads = 0, weight_grads = 0, sends = 0, receives = 0, flights = 0;
  };
  std::vector<Stage> samples;     // per stage: how many actions each mean is of
  std::vector<std::string> notes;  // what could not be measured, and what was assumed instead
};
KinetoFit fit_kineto(const std::vector<KinetoRun>& runs);

// The run as one of pipetwin's measured traces (what compare and `plot
// gantt` read): its median step's timeline; in otherData its configuration
// (kineto_configuration), producer "torch.profiler", the program, and under
// measured every step's time and bubble, the step it holds and the noise
// its steps' spread shows.
schedule::Trace kineto_trace(const KinetoRun& run);
// The configuration fields of its otherData ("model" is "torch.profiler
// run", "hardware" the host); a prediction of it carries the same.
nlohmann::json kineto_configuration(const KinetoRun& run);

}  // namespace pipetwin::calibration
