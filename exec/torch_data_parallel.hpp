// Data parallelism for the executor (internal to exec/: includes LibTorch).
// Each of the D replicas runs the same action list on its 1/D of the
// mini-batch; a stage's gradients are summed over its data group (the same
// stage in every replica) where the IR says REDUCE_GRAD, asynchronously,
// while the rank goes on; the stage's STEP waits for them:
//
//   plain    REDUCE_GRAD: all-reduce (sum) of the stage's gradients, one flat
//            buffer;  STEP: the gradients / D, the stage's optimizer step
//   ZeRO-1   REDUCE_GRAD: reduce-scatter of that buffer, this replica's 1/D
//            shard;  STEP: the shard / D, the optimizer's step on the shard
//            of the weights alone (its state exists for that shard only),
//            then an all-gather of the updated weights into every replica
//   ZeRO-2/3 per layer, the gradients of every micro-batch reduce-scattered
//            as its backward completes, and under ZeRO-3 the weights
//            themselves sharded, gathered layer by layer where a forward or
//            a backward needs them (ShardedStage, exec/torch_zero.hpp);
//            REDUCE_GRAD times those reductions, STEP waits for them
//
// With expert parallelism (E > 1, ZeRO-0), the routed experts' gradients
// are summed apart, over the replicas that hold the same experts.
//
// Every replica's loss is the mean over its own micro-batches, so the sum
// over D replicas / D is the gradient of the global mini-batch's mean loss:
// the weights equal one replica's run of the whole batch, up to the order
// of the sums.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/run.hpp"
#include "exec/torch_comm.hpp"
#include "exec/torch_stage.hpp"
#include "exec/torch_zero.hpp"

namespace pipetwin::exec {

class DataParallel {
 public:
  // The data group of this process's pipeline rank; nothing is built for D = 1.
  // `zero`: ZeRO's stage, 0 to 3 (3: `reshard_after_forward` as FSDP's);
  // `meter`: the CPU's memory meter, or null.
  DataParallel(Comm& comm, const Placement& where, int zero, bool reshard_after_forward, models::Optimizer optimizer,
               double lr, MemoryMeter* meter);
  // Without ZeRO: all-reduce each stage's gradients in buckets of about
  // `bytes` (the first of `first_bytes` where positive), in the reverse of
  // the stage's order, each posted as soon as the stage's last backward has
  // made all of its gradients (DDP's overlap). Before adopt().
  void set_buckets(double bytes, double first_bytes);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // A stage of this rank, once built: ZeRO-2 and 3 take over its weights'
  // sharding (ZeRO-3 frees them here).
  void adopt(Stage& stage);
  // ZeRO-3: what a forward of `stage` calls around each layer (else null).
  LayerHooks* hooks(int stage);
  // Around a backward's (B or I) autograd pass of `stage`, and when a
  // micro-batch's gradients are complete (after its B or its W).
  void backward_begin(int stage, bool weight_gradients);
  void backward_end(int stage);
  void microbatch_done(int stage);
  // Around the stage's last backward action before its REDUCE_GRAD (B or W):
  // its buckets are posted as their gradients come, the rest at its end.
  void arm_buckets(int stage);
  void disarm_buckets(int stage);
  // ZeRO-3: every stage's weights gathered whole (a collective of the data
  // group), before they are saved.
  void gather_weights();
  // FSDP's UNSHARD and RESHARD of a stage, and the wait for its UNSHARD
  // before the stage computes (ShardedStage's; nothing below ZeRO-3).
  // unshard: the id of its gathers' record (times()), timed from the post
  // to the last one's end, as the simulator's; -1 where it gathers nothing.
  int unshard(int stage);
  void reshard(int stage);
  void gathered(int stage);

  // REDUCE_GRAD of `stage`: posts the reduction and returns. Returns an id
  // whose (start, end) times() gives once it completed, until the next
  // begin_step().
  int reduce(Stage& stage);
  // A new step: the previous step's records are dropped (every reduction of
  // it was waited for by its STEP), so that ids restart at 0.
  void begin_step();
  // Before STEP: waits for the stage's reduction (none posted: nothing).
  void wait(Stage& stage);
  // STEP: the update. ZeRO-1: on the shard, then the all-gather.
  void step(Stage& stage);
  // When reduction `id` was posted and when it completed (rank 0's clock).
  std::pair<double, double> times(int id) const;
  // Bytes of one stage's gradients that reduce() moves into the collective.
  std::int64_t bytes(int id) const;

  int size() const { return where_.data; }
  // ZeRO-2 and 3: the seconds waited for the weights' all-gathers so far.
  double gather_wait_s() const;
  // ZeRO-1 and 2: the STEP's all-gathers of the updated weights so far
  // (each waited for at once; ZeRO-2's a unit at a time): how many, their
  // seconds, the bytes of the parts each member contributed, summed.
  struct Gathers {
    std::int64_t calls = 0;
    double seconds = 0, part_bytes = 0;
  };
  Gathers step_gathers() const;
  // Per stage, the bytes its last reduction put into the collective.
  const std::map<int, std::int64_t>& stage_bytes() const { return stage_bytes_; }
  // Per bucketed stage, (buckets, of them posted before its last backward ended) in the last step.
  std::map<int, std::pair<int, int>> bucket_counts() const;

 private:
  struct Pending {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::shared_ptr<std::thread> watcher;  // notes when the work completes (Gloo's works have no future)
    at::Tensor flat;   // the gradients (plain: reduced in place)
    at::Tensor shard;  // ZeRO-1: this replica's reduced shard
    at::Tensor experts;  // expert parallelism: the routed experts' gradients (summed over expert_peers_)
    int id = 0;
  };
  struct Sharded {  // ZeRO-1: what this replica updates
    at::Tensor weights;  // its shard of the stage's flat weights (fp32 leaf)
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    std::int64_t chunk = 0;
  };
  struct Record {
    double start = 0;
    std::shared_ptr<std::atomic<double>> end;
    std::int64_t bytes = 0;
  };

  struct Buckets {  // one stage's, without ZeRO
    std::vector<std::vector<at::Tensor>> params;  // by bucket, the stage's last weights first
    std::map<const c10::TensorImpl*, std::size_t> bucket_of;
    std::vector<int> missing;  // by bucket, in the armed backward: gradients not made yet
    std::size_t next = 0;      // the first bucket not posted
    bool armed = false;
    std::vector<at::Tensor> flats;  // by bucket posted: its gradients, all-reduced in place
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    int in_backward = 0;  // buckets posted before the backward's end, this step
    double armed_at = -1;  // when the last backward that posted them began (rank 0's clock); -1: none this step
  };
  void build_buckets(Stage& stage);
  void on_gradient(int stage, const c10::TensorImpl* param);
  void restart_buckets(Buckets& b);
  void post_buckets(Buckets& b, bool all);
  void step_buckets(Stage& stage, Buckets& b);

  void update_shard(Stage& stage, const at::Tensor& shard_grad);
  bool post_flat(Stage& stage, Pending& p, Record& rec);
  bool zero1() const { return zero_.level == 1; }
  ShardedStage* sharded_stage(int stage);

  Comm& comm_;
  Placement where_;
  ZeroOptions zero_;  // ZeRO's stage (2 and 3: ShardedStage), the optimizer
  MemoryMeter* meter_;
  c10::intrusive_ptr<c10d::Backend> group_;   // the data group, or (HSDP) this replica's shard group
  c10::intrusive_ptr<c10d::Backend> across_;  // HSDP: the same shard in every shard group
  c10::intrusive_ptr<c10d::Backend> expert_peers_;  // E < D: the replicas holding this replica's experts
  Gathers step_gathers_;
  std::map<int, Pending> pending_;  // by stage
  std::map<int, Sharded> sharded_;  // by stage
  std::map<int, std::unique_ptr<ShardedStage>> zero_stages_;  // by stage: ZeRO-2 and 3
  double bucket_bytes_ = 0, first_bucket_bytes_ = 0;
  std::map<int, Buckets> buckets_;  // by stage
  std::vector<Record> records_;
  // By stage: its UNSHARD's record and the thread that notes when its gathers end.
  std::map<int, std::pair<int, std::thread>> unsharding_;
  std::map<int, std::int64_t> stage_bytes_;
};

}  // namespace pipetwin::exec
