// One pipeline configuration, built once: the model and hardware loaded, the
// Program generated, lowered, partitioned and validated, and its stage costs.
// Every command that simulates, runs, calibrates or sweeps starts here; what
// follows takes the Program, never the schedule's name.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/families.hpp"
#include "models/stage_costs.hpp"
#include "schedule/program.hpp"
#include "schedule/trace_metadata.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::twin {

// What names one configuration, as given (the command line's words; each is
// parsed once, in build_scenario, into the Program and the request's enums).
// `schedule` is a generator's name or a schedule file (pipetwin text or JSON,
// PyTorch CSV, compute-only or with transfers): a file gives K, V, M, the
// placement and the recompute policy (and maybe the partition) itself, and
// an option given with it must agree. 0 and "" mean "not given".
struct ScenarioSpec {
  std::string model, hardware, schedule;  // model spec file; preset or file; generator name or schedule file
  int ranks = 0, microbatches = 0, virtual_stages = 0, batch = 0;  // V 0: 1; batch 0: M
  std::string recompute, partition, optimizer = "adam";           // "": none; "": auto (or the file's)
  int tensor_parallel = 0, data_parallel = 0;                     // T, D; 0: 1 (or the file's)
  bool sequence_parallel = false;
  // ZeRO's stage over the data group (Program::zero: 0 none, 1 the optimizer
  // state, 2 and the gradients, 3 and the weights as FSDP2 shards them), and
  // with 3 whether a unit's gathered weights are freed after its forward.
  int zero = 0;
  bool reshard_after_forward = true;
  // ZeRO-3 keeping the weights: FSDP's UNSHARD/RESHARD by schedule::insert_unshards; 0: none (or the file's).
  int max_active_stages = 0;
  int shard_group = 0;  // HSDP: ZeRO's shards over groups of G replicas (Program::shard_group); 0: all D
  std::string collective;  // the all-reduces' algorithm: auto, ring or tree; "": auto
  // With D > 1: gradient buckets of this many MB (10^6 bytes), each reduced as
  // the backward produces it (PartitionRequest::gradient_bucket_bytes); 0: one
  // reduction after the stage's last backward.
  double grad_bucket_mb = 0;
  // With buckets: the first one's size in MB apart (DDP's first bucket is
  // 1 MiB, 1.048576 MB); 0: the same as the others.
  double grad_bucket_first_mb = 0;
  // The model's arithmetic, another 16-bit one than its spec's
  // (models::with_precision: bf16, fp16 or fp8); "": the spec's.
  std::string precision;
  // Context parallelism: each sample's sequence split over C ranks
  // (Program::context_parallel; 0: 1), and how they share keys and values:
  // "ring" (default) or "all-gather".
  int context_parallel = 0;
  std::string context_attention;
  // Expert parallelism: a mixture's routed experts split over groups of E
  // consecutive replicas of the D x C (Program::expert_parallel; 0: 1).
  int expert_parallel = 0;
  // The experts' tensor-parallel degree (Program::expert_tensor_parallel): 0
  // the tensor group's T, or 1: the experts whole on each device, the
  // expert group spread over the tensor group too (E a multiple of T).
  int expert_tensor_parallel = 0;
};

// Refuses --context-attention `attention` where no context group has more
// than one device (`largest_context`, the largest C asked for): it would not apply.
void check_context_attention(const std::string& attention, int largest_context);

// True when `schedule` names a file rather than a generator.
bool is_schedule_file(const std::string& schedule);

// A schedule file's Program given --recompute `word` (its policy `given`):
// the option's where the file leaves it open (a PyTorch CSV has none);
// refused, naming both, where the file's differs.
void settle_recompute(schedule::Program& p, schedule::RecomputePolicy given, const std::string& word, const std::string& file);
// schedule::validate of a Program read from `file`: an error names the file.
schedule::ValidationReport validate_file(const schedule::Program& p, const std::string& file);

// The complete (lowered) Program the spec names, not yet partitioned unless
// its file holds a partition; `model` in topological order (its layer count
// bounds the stages). Throws pipetwin::Error naming the option or the file.
// `notes`, when given, gets what reading a schedule file said (schedule::read_program).
schedule::Program scenario_program(const models::Model& model, const ScenarioSpec& spec,
                                   std::vector<std::string>* notes = nullptr);
// The same where something else than a model's layers bounds the stages
// (a cost table's rows): `check_stages` throws for a count it refuses.
using StageBound = std::function<void(std::int64_t stages)>;
schedule::Program scenario_program(const ScenarioSpec& spec, const StageBound& check_stages,
                                   std::vector<std::string>* notes = nullptr);

struct Scenario {
  models::Model model;
  models::Hardware hardware;
  models::PartitionRequest request;  // its program: the Program below, without the partition
  schedule::Program program;         // complete, validated, partitioned
  std::unique_ptr<models::StageCostModel> costs;
  double samples = 0;                // per step: batch
  std::vector<std::string> notes;    // what reading its schedule file said, for the user
  std::vector<std::string> hardware_notes;  // the model's kinds a calibrated hardware has no curve for
  std::string recompute_name() const;  // the recompute choice: none, full, selective, uniform:N, ...
  // Stage s's peak of stashed activations in bytes: the IR's count of
  // micro-batches (the stage costs' own) times their sizes.
  double predicted_stash_bytes(int s) const;
  schedule::TraceMetadata configuration() const;  // the configuration fields of its traces
  nlohmann::json describe() const;                 // configuration().configuration_json(), T, D, collectives
  // Per stage, the algorithm of its data-parallel all-reduce (empty for D = 1).
  std::vector<std::string> data_parallel_collectives() const;
  // "auto: ring, tree": the collective asked for, and the algorithms its all-reduces use.
  std::string collectives_used() const;
  std::string headline() const;
};

// Throws pipetwin::Error naming the option or file at fault.
std::unique_ptr<Scenario> build_scenario(const ScenarioSpec& spec);
// The same from an already loaded model (in topological order) and hardware;
// `validate` runs the schedule validator (generated schedules are valid by
// construction, which the tests check over the whole generator grid).
std::unique_ptr<Scenario> build_scenario(const models::Model& model, const models::Hardware& hardware,
                                         const ScenarioSpec& spec, bool validate);

// The scenario of a Program that is already complete and partitioned (a
// traced run's, an imported file's): nothing is generated or partitioned.
// `checkpoint`: how a checkpointed micro-batch is re-run (uniform, block),
// which a Program does not record.
std::unique_ptr<Scenario> scenario_of(const models::Model& model, const models::Hardware& hardware,
                                      schedule::Program program, int microbatch_size, double batch,
                                      models::Optimizer optimizer,
                                      models::Collective collective = models::Collective::Auto,
                                      models::LayerCheckpoint checkpoint = {});

// What a trace records of its configuration, so that it stands alone for
// compare and calibrate: the configuration, the model spec's text, the
// hardware (preset name or file text), the IR's predicted stash bytes per
// stage and the Program itself (its text form). The producer adds its
// sections (summary, measured, ...).
schedule::TraceMetadata trace_metadata(const Scenario& scenario, const ScenarioSpec& spec, std::string producer);

}  // namespace pipetwin::twin
