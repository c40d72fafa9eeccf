// The partitioner: contiguous ranges of the layer order, one per stage, that
// minimise the slowest stage's time per micro-batch (forward + backward,
// + recompute, + the transfers across its cuts) subject to every stage's
// memory fitting its device. Exact: dynamic programming over cut positions,
// O(S·n²). Uniform-by-layers and by-parameters are there to compare with.
//
//   layers  0 1 2 | 3 4 5 6 | 7 8 | 9        <- cuts carry every tensor that crosses them
//   stage     0   |    1    |  2  | 3
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/collectives.hpp"
#include "models/hardware.hpp"
#include "models/model.hpp"
#include "models/recompute.hpp"
#include "schedule/error.hpp"
#include "schedule/program.hpp"

namespace pipetwin::models {

enum class Optimizer { SGD, Momentum, Adam };  // 0, 1, 2 fp32 states per parameter
Optimizer parse_optimizer(std::string_view name);
std::string_view optimizer_name(Optimizer optimizer);
const std::vector<std::string>& optimizer_names();  // the allowed values, in order

enum class Method { Optimal, Uniform, Parameters };
std::string_view method_name(Method m);
Method parse_method(std::string_view name);  // "auto" is a spelling of optimal
const std::vector<std::string>& method_names();  // optimal, uniform, parameters

// What the partitioner and the stage costs need to know of a configuration.
// The Program is the schedule itself (its placement stage -> rank, V, M and
// recompute policy; its actions decide how many micro-batches each stage
// stashes); its partition, if any, is ignored. Nothing here rebuilds a
// Program from a schedule's name.
struct PartitionRequest {
  schedule::Program program = default_program();
  int microbatch_size = 1;       // samples per micro-batch
  Optimizer optimizer = Optimizer::Adam;
  std::vector<Device> devices;   // one per rank; empty: the hardware's (Hardware::rank_devices)
  // The all-reduces' algorithm (data-parallel and tensor-parallel): auto picks
  // the faster closed form for each message and group (models/collectives.hpp).
  Collective collective = Collective::Auto;
  // What a checkpointed micro-batch keeps and re-runs (models/recompute.hpp):
  // the whole stage, or Megatron-LM's layer groups (with the Program's full).
  LayerCheckpoint checkpoint;
  // Data parallelism: the gradient buckets' size in bytes (DDP's
  // bucket_cap_mb, Megatron-LM's --ddp-bucket-size with
  // --overlap-grad-reduce): each bucket's reduction starts as the stage's
  // last backward has produced it. 0: the whole stage's gradients in one
  // reduction after that backward.
  double gradient_bucket_bytes = 0;
  // With buckets: the first one's size apart (DDP's 1 MiB); 0: as the others.
  double gradient_first_bucket_bytes = 0;
  // Context parallelism (the Program's context_parallel): keys and values
  // all-gathered before each attention (Llama 3's variant) instead of passed
  // around the ring under the attention of the block held.
  bool context_all_gather = false;
  int ranks() const { return program.num_ranks; }
  int stages() const { return program.num_stages(); }
  int microbatches() const { return program.num_microbatches; }
  schedule::RecomputePolicy recompute() const { return program.recompute; }
  // One rank, one micro-batch, GPipe: the complete Program of a single device.
  static schedule::Program default_program();
};

struct StagePlan {
  schedule::LayerRange layers;
  double compute_s = 0;     // F + B (+ R) of one micro-batch
  double transfer_s = 0;    // its cuts, activations forward and gradients backward
  double time_s = 0;        // compute + transfer
  double memory_bytes = 0;  // weights, gradients, optimizer state, stashed activations
  double capacity_bytes = 0;
  std::int64_t params = 0;
  double cut_in_bytes = 0, cut_out_bytes = 0;  // per micro-batch
};

struct Partition {
  Method method = Method::Optimal;
  std::vector<StagePlan> stages;
  double bottleneck_s = 0;
  double ideal_s = 0;  // the total stage time spread evenly
  bool fits = true;
  double imbalance() const { return ideal_s > 0 ? bottleneck_s / ideal_s - 1 : 0; }
  std::vector<schedule::LayerRange> ranges() const;
};

// No split of the model fits in memory.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// Throws pipetwin::Error when `model` has fewer layers than `stages` (a
// stage needs at least one); cheap, so callers may check before building.
void check_stage_count(const Model& model, std::int64_t stages);

// Throws pipetwin::Error when there are more stages than layers, or (for
// Method::Optimal) OutOfMemory when no partition fits, naming the stage and the overflow.
Partition partition_model(const Model& model, const Hardware& hardware, const PartitionRequest& request,
                          Method method = Method::Optimal);

// The cost of any given split (used by the methods above and by tests).
Partition evaluate_partition(const Model& model, const Hardware& hardware, const PartitionRequest& request,
                             const std::vector<schedule::LayerRange>& ranges, Method method);

}  // namespace pipetwin::models
