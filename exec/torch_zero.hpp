// ZeRO-2 and ZeRO-3 for one stage of one replica (internal to exec/:
// includes LibTorch), as FSDP2 and DeepSpeed run them. A unit is a layer of
// the stage with weights; each unit's weights (flattened, padded to D equal
// parts) have this replica's 1/D as an fp32 master, the optimizer's only
// state:
//
//   ZeRO-2   the weights stay whole; when a micro-batch's gradients are
//            complete (its B, or its W), each unit's are reduce-scattered
//            (posted) and dropped, this replica's part summed over the
//            micro-batches; STEP: the optimizer on the parts, then an
//            all-gather of each unit's updated weights, one at a time.
//   ZeRO-3   the weights are held as the parts alone. Before a layer of a
//            forward (F or R) runs, its unit is all-gathered, the next unit's
//            gather posted meanwhile (prefetch one unit ahead). Resharding
//            after the forward (the default): the unit is freed after the
//            layer, and a backward gathers it again when the gradient of
//            its output arrives (a hook on that output), the unit before it
//            prefetched; the gradients as ZeRO-2's; STEP: the optimizer on
//            the parts. `reshard_after_forward` off (torchtitan's choice
//            under a pipeline): the units gathered by the step's first
//            forward stay to its STEP, the gradients accumulate whole, and
//            REDUCE_GRAD reduce-scatters each unit's.
//
// A freed unit keeps its tensors and their sizes; only their storage is
// released and later refilled in place (as FSDP does), so the autograd
// graph, which holds the very tensors (and views of them), sees the
// gathered values when its backward runs. Every replica posts the same
// collectives in the same order (the same actions, the same graph), which
// is what c10d's groups match them by.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <deque>
#include <memory>
#include <vector>

#include "exec/torch_stage.hpp"
#include "models/model.hpp"

namespace pipetwin::exec {

class MemoryMeter;

struct ZeroOptions {
  int level = 2;                      // ZeRO's stage (ShardedStage takes 2 and 3)
  bool reshard_after_forward = true;  // ZeRO-3
  models::Optimizer optimizer = models::Optimizer::SGD;
  double lr = 0.01;
};

class ShardedStage final : public LayerHooks {
 public:
  // ZeRO-3: the stage's weights are sharded and freed here. `meter` (the
  // CPU's, or null): gathered weights are not any stage's stash.
  // `group`: the replicas sharing the weights' parts (ZeRO's data group, or
  // HSDP's shard group), this one at `index` of them; `across` (HSDP, else
  // null): the same part in every shard group, over which STEP all-reduces
  // the reduced gradients; `replicas`: D, by which the sum is divided.
  ShardedStage(Stage& stage, c10d::Backend& group, c10d::Backend* across, int index, int replicas, ZeroOptions options,
               MemoryMeter* meter);
  ~ShardedStage() override;
  ShardedStage(const ShardedStage&) = delete;
  ShardedStage& operator=(const ShardedStage&) = delete;

  // LayerHooks (ZeRO-3): around each layer of a forward.
  void before(int position) override;
  void after(int position, const at::Tensor& output) override;

  // Around a backward's autograd pass; `weight_gradients`: a B (an I
  // leaves them to its W).
  void backward_begin(bool weight_gradients);
  void backward_end();
  // A micro-batch's gradients are complete (after its B, or its W).
  void microbatch_done();
  // REDUCE_GRAD: reduce-scatters what has not been (ZeRO-3 without
  // resharding). The works this stage's reductions still run.
  void reduce();
  std::vector<c10::intrusive_ptr<c10d::Work>> in_flight() const;
  // Waits for every reduction and sums it into the parts.
  void wait();
  // STEP: the optimizer on the parts; ZeRO-2 gathers the weights after it.
  void step();
  // ZeRO-3: every unit gathered (a collective), to save the weights.
  void gather_all();
  // FSDP's actions (ZeRO-3 keeping the weights between uses; no-ops
  // otherwise, as the simulator's): UNSHARD posts every unit's gather and
  // returns their works; before a compute of a stage the list gathers so,
  // `gathered` waits for them (PyTorch's _assert_unsharded); RESHARD frees
  // every unit.
  std::vector<c10::intrusive_ptr<c10d::Work>> unshard();
  void gathered();
  void reshard();

  // Gradient bytes this replica put into reduce-scatters this step.
  std::int64_t step_bytes() const { return step_bytes_; }
  // Seconds waited for the weights' all-gathers so far (F, R, B, I, STEP).
  double gather_wait_s() const { return gather_wait_s_; }
  // ZeRO-2's all-gathers at STEP so far, one unit at a time: calls, seconds
  // from each one's post to its end, and the parts this replica contributed.
  struct StepGathers {
    std::int64_t calls = 0;
    double seconds = 0, part_bytes = 0;
  };
  const StepGathers& step_gathers() const { return step_gathers_; }

 private:
  struct Unit;
  struct Reduction {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor whole, part;
    std::size_t unit = 0;
  };

  bool shards_weights() const { return options_.level == 3; }
  bool frees_after_use() const { return shards_weights() && options_.reshard_after_forward; }
  bool keeps_weights() const { return shards_weights() && !options_.reshard_after_forward; }  // FSDP's actions apply
  // The unit of the layer at `position`, or -1 for a layer without weights.
  int unit_at(int position) const;
  void post_gather(std::size_t u);
  void materialize(std::size_t u);
  void release(std::size_t u);
  // A gather posted and not used (a prefetch, an UNSHARD): finished and dropped, then the unit freed.
  void discard(std::size_t u);
  void on_output_gradient(int position);
  void post_reductions();
  void post_reduction(std::size_t u);
  void reap(bool all);
  void finish_oldest();
  static constexpr std::size_t kInFlight = 2;

  Stage& stage_;
  c10d::Backend& group_;
  c10d::Backend* across_;
  int size_, replicas_;
  ZeroOptions options_;
  MemoryMeter* meter_;
  std::vector<Unit> units_;
  std::vector<int> unit_of_;                   // by position in the stage: its unit, or -1
  std::vector<std::vector<std::size_t>> readers_;  // by position: the units reading its output
  std::vector<int> inside_inputs_;             // by unit: its inputs made by the stage's layers
  std::vector<int> waiting_;                   // by unit, in a backward: those inputs' gradients to come
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::deque<Reduction> reductions_;  // posted, in order
  std::int64_t step_bytes_ = 0;
  double gather_wait_s_ = 0;
  StepGathers step_gathers_;
  bool in_backward_ = false;
  bool reduce_in_backward_ = false;
};

}  // namespace pipetwin::exec
