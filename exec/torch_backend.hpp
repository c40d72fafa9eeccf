// The executor's backend of the schedule interpreter (internal to exec/:
// includes LibTorch). The RankInterpreter decides what runs next; this only
// carries each action out and times it:
//
//   F  run the stage forward; stash what backward needs (only the input when
//      the micro-batch is recomputed); hand the outputs to SEND_F or to the
//      next stage on this rank
//   R  re-run the forward of a checkpointed micro-batch, with autograd
//   B  backward from the received gradient (the loss on the last stage)
//   I  the same, linear weight gradients queued;   W  run that queue
//   STEP  the stage's optimizer step
//   REDUCE_GRAD  the stage's gradients over its data group (D > 1, posted;
//      STEP waits for it, see DataParallel)
//   SEND_*  post an asynchronous c10d send;  RECV_*  wait for a c10d receive
//      (Gloo: posted ahead, when the previous RECV of the rank's list runs;
//      NCCL: posted by the RECV itself)
//
// Here the rank's stages and steps; the compute actions are in
// torch_backend_compute.cpp, the transfers in torch_backend_transfer.cpp.
#pragma once

#include <torch/torch.h>

#include <array>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "exec/run.hpp"
#include "exec/torch_clock.hpp"
#include "exec/torch_comm.hpp"
#include "exec/torch_data_parallel.hpp"
#include "exec/torch_layers.hpp"
#include "exec/torch_memory.hpp"
#include "exec/torch_stage.hpp"
#include "exec/torch_task.hpp"
#include "schedule/interpreter.hpp"

namespace pipetwin::exec {

class TorchBackend final : public schedule::Backend {
 public:
  TorchBackend(const RunConfig& config, Comm& comm, at::Device device, MemoryMeter* meter);

  void begin_step(int step, const Batch& batch);
  // Waits for this step's sends; returns the rank's timed actions.
  std::vector<schedule::TimedAction> end_step();
  double step_loss() const { return loss_; }
  // The CPU time this step's compute actions took on the calling thread
  // (CLOCK_THREAD_CPUTIME_ID); negative where that is not the work's: on
  // CUDA (the kernels run apart from it) and with intra-op threads beside it.
  double step_compute_cpu_s() const { return device_.is_cuda() || at::get_num_threads() > 1 ? -1 : compute_cpu_s_; }
  bool holds_last_stage() const;

  void compute(schedule::RankId rank, const schedule::Action& action) override;
  void send(schedule::RankId rank, const schedule::Action& action, schedule::RankId peer) override;
  bool recv(schedule::RankId rank, const schedule::Action& action, schedule::RankId peer) override;

  const std::map<int, std::unique_ptr<Stage>>& stages() const { return stages_; }
  const DataParallel* data_parallel() const { return dp_.get(); }
  DataParallel* data_parallel() { return dp_.get(); }
  // Per local stage, the peak bytes its stashes held (measured).
  std::vector<std::pair<int, double>> stage_peak_stash_bytes() const;

 private:
  struct Stash {
    std::vector<at::Tensor> inputs;  // as received; leaves when autograd runs through them
    std::vector<at::Tensor> roots;   // outputs with their graph, or the loss
    bool checkpointed = false;
    bool layered = false;            // checkpointed by layer groups, re-run inside B (R does nothing)
    int version = 0;
    WeightGradQueue deferred;        // linear weight gradients between I and W
    std::int64_t device_bytes = 0;   // CUDA: allocator growth across the forward
  };

  // c10d tags leave room for this many tensors per message (tag()).
  static constexpr int kMaxCutTensors = 64;
  static std::string mb_name(int s, int mb) { return "stage " + std::to_string(s) + " micro-batch " + std::to_string(mb); }

  Stage& stage(int s);
  Stash& stash(int s, int mb, const char* op);
  void forward(int s, int mb);
  void recompute(int s, int mb);
  void backward(int s, int mb, bool input_only);
  void weight_grad(int s, int mb);
  // Hands a forward's outputs or a backward's input gradients to the next
  // stage: into the inbox when it is on this rank, else to the outbox.
  void deliver(const schedule::MessageKey& key, std::vector<at::Tensor> tensors, int from_stage, std::int64_t in_flight);
  void release_outputs(const Stage& st, const std::vector<at::Tensor>& outputs) const;
  std::vector<at::Tensor> take(const schedule::MessageKey& key, const char* what);
  std::vector<at::Tensor> leaves(const Stage& st, const std::vector<at::Tensor>& inputs) const;
  at::Tensor slice(const at::Tensor& t, int mb) const;
  int tag(const schedule::MessageKey& key) const;
  void reap_sends(bool wait_all);
  // Receives posted ahead (Gloo): this step's receives in list order.
  struct Posted {
    std::vector<at::Tensor> buffers;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;  // empty: received when posted (NCCL, PIPETWIN_POST_AHEAD=0)
    int stage = 0;
    std::int64_t waiting = 0;  // bytes counted in posted_bytes_ until received
  };
  Posted post(const schedule::Action& a, schedule::RankId peer);
  void post_ahead();
  void account_cuda_stash(int s, std::int64_t delta);
  void sample_stash();

  const RunConfig& config_;
  Comm& comm_;
  Placement where_;                   // this process's (t, d, k): it runs pipeline rank k's list
  std::unique_ptr<DataParallel> dp_;  // D > 1
  std::set<int> unshards_;  // stages this rank's list gathers by UNSHARD
  std::set<std::array<int, 3>> bucket_leads_;  // (op, stage, micro-batch): a stage's last backward before its REDUCE_GRAD
  std::map<std::size_t, int> reductions_;  // index in timed_ -> its reduction's id (timed when it completes)
  at::Device device_;
  MemoryMeter* meter_;  // null on CUDA
  std::unique_ptr<ActionClock> clock_;
  std::map<int, std::unique_ptr<Stage>> stages_;
  std::map<std::pair<int, int>, Stash> stash_;
  struct Outgoing {
    std::vector<at::Tensor> tensors;
    int from_stage = 0;
    std::int64_t in_flight = 0;  // bytes only the message holds
  };
  struct Sending {
    c10::intrusive_ptr<c10d::Work> work;
    std::vector<at::Tensor> tensors;
    int from_stage = 0;
    std::int64_t in_flight = 0;
  };
  std::map<schedule::MessageKey, std::vector<at::Tensor>> inbox_;
  bool post_ahead_ = false;                 // Gloo, unless PIPETWIN_POST_AHEAD=0
  std::vector<schedule::Action> receives_;  // this rank's receives, in list order (with post_ahead_)
  std::size_t next_receive_ = 0;            // this step's first of them not posted yet
  std::map<schedule::MessageKey, Posted> posted_;
  std::map<int, std::int64_t> posted_bytes_;  // per stage: its inputs' buffers posted, not yet received
  std::map<schedule::MessageKey, Outgoing> outbox_;
  std::vector<Sending> sending_;
  std::map<int, std::int64_t> in_flight_;  // per stage: its outputs still being sent
  std::vector<std::pair<schedule::Action, std::size_t>> timed_;
  std::map<int, std::int64_t> cuda_stash_;  // CUDA: allocator growth of live stashes
  std::map<int, std::int64_t> stash_peak_;   // per stage, sampled between actions
  int step_ = 0;
  Batch batch_;
  at::Tensor loss_sum_;
  double loss_ = 0;
  double compute_cpu_s_ = 0;  // this step's, so far (step_compute_cpu_s)
};

}  // namespace pipetwin::exec
