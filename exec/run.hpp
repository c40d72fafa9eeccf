// Execution of a schedule IR Program for real: one process per rank, each
// building its stages' layers with LibTorch, walking its action list through
// the schedule's RankInterpreter, exchanging activations and gradients with
// c10d point-to-point messages (Gloo on the CPU, NCCL on CUDA).
//
//   launcher (pipetwin run)        TCPStore  <-- rendezvous, clocks, results
//     |-- rank 0: stage 0 ... --Gloo/NCCL--> rank 1: stage 1 ... --> rank K-1
//
// This header includes no LibTorch header: the CLI and the tests use it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exec/host_load.hpp"
#include "models/model.hpp"
#include "models/partition.hpp"
#include "models/recompute.hpp"
#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::exec {

// Where this process sits, torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
struct RankEnv {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool store_hosted = false;  // the launcher holds the TCPStore: rank 0 is a client
};
// Reads the torchrun environment; nullopt when RANK is not set.
// Throws pipetwin::Error naming the variable that is malformed.
std::optional<RankEnv> rank_env_from_environment();

// Where a process sits in the T x K x D layout (Megatron-LM's order: device
// t + T (d + D k), Program::first_device): its tensor-parallel member t, its
// replica d, its pipeline rank k (whose action list it runs).
struct Placement {
  int tensor = 1, data = 1;   // T, D
  int shard = 0;              // HSDP: ZeRO's shard groups of G consecutive replicas (Program::shard_group); 0: all D
  int expert = 1;             // E: a mixture's experts split over groups of E consecutive replicas (Program::expert_parallel)
  int member = 0, replica = 0, pipeline_rank = 0;
  static Placement of(const schedule::Program& p, int device);
  // The device of this process's counterpart (same t, same d) at pipeline rank k.
  int device_at(int k) const { return member + tensor * (replica + data * k); }
  // The devices of pipeline rank k's data group (same t, every d), by replica.
  std::vector<int> data_group(int k) const;
  // ZeRO's shards: G, or D without HSDP; this replica's index among them.
  int shard_size() const { return shard > 0 ? shard : data; }
  int shard_index() const { return replica % shard_size(); }
  // HSDP: the devices of this replica's shard group at pipeline rank k (its
  // G consecutive replicas), and those holding the same shard in every
  // group (the all-reduce across groups), each by replica.
  std::vector<int> shard_group(int k) const;
  std::vector<int> replicate_group(int k) const;
  // Expert parallelism: the devices of this replica's expert group at
  // pipeline rank k (its E consecutive replicas), and those holding the
  // same experts in every expert group (their gradients' reduction), each
  // by replica.
  std::vector<int> expert_group(int k) const;
  std::vector<int> expert_peers(int k) const;
  int expert_index() const { return replica % expert; }
  // The devices of this process's tensor-parallel group (same d, same k), by member.
  std::vector<int> tensor_group() const;
};

// Refuses (pipetwin::Error naming the model, the layer and the field) a
// mixture of experts the executor does not build (DeepSeek's latent
// attention and routing bias, a capacity that drops tokens), or whose
// experts `expert_parallel` members cannot split.
void check_moe_run(const models::Model& model, int expert_parallel);

// Where the stages run: the CPU (c10d Gloo) or CUDA GPUs (c10d NCCL).
enum class Device { Cpu, Cuda };
Device parse_device(std::string_view name);  // "cpu", "cuda"; throws pipetwin::Error
const std::vector<std::string>& device_names();
std::string_view device_name(Device device);
std::string_view backend_name(Device device);  // "Gloo", "NCCL"

struct RunConfig {
  models::Model model;        // in topological order
  schedule::Program program;  // complete (lowered), validated, partitioned
  int microbatch_size = 1;
  // How a checkpointed micro-batch is re-materialized: the whole stage by its
  // R (Stage), or layer groups inside its B (uniform, block); with the
  // program's recompute selective, every attention core in its B.
  models::LayerCheckpoint checkpoint;
  // D > 1 without ZeRO: the gradients all-reduced in buckets of about this
  // many bytes (the first of `first_bucket_bytes` where set), each posted as
  // the stage's last backward makes it (DDP's overlap); 0: at once at REDUCE_GRAD.
  double bucket_bytes = 0, first_bucket_bytes = 0;
  int steps = 1;
  Device device = Device::Cpu;
  models::Optimizer optimizer = models::Optimizer::SGD;
  double lr = 0.01;
  std::uint64_t seed = 0;
  int threads = 0;                 // intra-op threads per rank; 0: cores / ranks on this host
  // On the CPU: freed memory stays in the rank's heap (glibc told not to
  // return it), as the CUDA caching allocator keeps it on a GPU. false:
  // glibc's defaults, under which a backward that frees stashed activations
  // gives pages back to the kernel and the next one faults them in again.
  bool keep_freed_memory = true;
  double timeout_s = 120;          // rendezvous and each transfer
  std::string save_weights;        // directory: one file per layer after the last step
};

// What one rank measured, sent to rank 0 at the end.
struct RankReport {
  int rank = 0;
  int pipeline_rank = -1;          // k: the slot of `steps` it fills; -1: `rank` (T = D = 1)
  int replica = 0, member = 0;     // d, t
  std::string host;
  int threads = 1;
  std::string heap = "system";     // keep, system (CPU heap policy) or cuda-caching
  int host_cores = 0;              // CPUs this rank's process may run on (its affinity); 0: unknown
  double sched_slice_s = 0;        // the host's scheduler slice (scheduler_slice_s); 0: unknown
  double gloo_backoffs = 0;        // sleeps its Gloo loop thread took out of a spin (gloo_backoff.hpp)
  double clock_offset_s = 0;       // added to this rank's clock to read rank 0's
  double clock_uncertainty_s = 0;  // half the best round trip of the alignment
  std::vector<schedule::Timeline> steps;  // one rank filled; seconds on rank 0's clock
  std::vector<double> losses;             // per step, on the rank holding the last stage
  std::vector<std::pair<int, double>> stage_peak_stash_bytes;  // (stage, bytes)
  std::vector<std::pair<int, int>> stage_peak_versions;        // (stage, weight versions)
  // The collectives of its groups: per stage's data-group reduction its
  // kind, bytes, group and backend; its tensor-parallel group (T > 1).
  nlohmann::json collectives = nlohmann::json::array();
  // Per step, the seconds it spent in its tensor group's collectives (T > 1; else empty).
  std::vector<double> tp_collective_s;
  // Per step (E > 1; else empty), its expert group's all-to-alls: {calls,
  // seconds (from each call to its wait's return), bytes it sent}.
  nlohmann::json all_to_all = nlohmann::json::array();
  // Per step (ZeRO-1 with D > 1; else empty), its STEPs' all-gathers of the
  // updated weights: {calls, seconds, bytes of the parts it contributed}.
  nlohmann::json all_gather = nlohmann::json::array();
  // Per step, the seconds its forwards, backwards and steps waited for ZeRO-2
  // and 3's all-gathers of the weights (D > 1, --zero 2 or 3; else empty):
  // the gathers' exposed time.
  std::vector<double> gather_wait_s;
  // Per step, the CPU time of its compute actions (its thread's own; CPU
  // ranks only, else empty): RunNoise::step_compute_cpu_s.
  std::vector<double> compute_cpu_s;
  double peak_allocated_bytes = 0, baseline_bytes = 0, peak_rss_bytes = 0;
  std::vector<HostSample> host_samples;  // when the steps began, then at the end of each
  nlohmann::json to_json() const;
  static RankReport from_json(const nlohmann::json& j);
};

// Everything rank 0 gathered.
struct RunResult {
  std::vector<RankReport> ranks;
  // Every pipeline rank, each step shifted to start at 0; with D > 1, the
  // replica whose step ended last (the step waits for it), as simulated.
  std::vector<schedule::Timeline> steps;
  std::vector<double> step_times_s;
  std::vector<double> bubble_fractions;  // per step: mean over ranks of its share not in compute
  std::vector<double> losses;             // per step; with D > 1 the mean over the replicas
  // Per step, with D > 1: each REDUCE_GRAD (by action, "1REDUCE_GRAD") and
  // its last post over the replicas, on the step's time (the whole data
  // group in: what the collective itself took runs from there).
  std::vector<std::map<std::string, double>> reduction_posts;
  double wall_s = 0;                      // all steps, first action to last
  int representative_step = 0;            // the median step (warm-up excluded)
  std::vector<double> stage_peak_stash_bytes;
  std::vector<int> stage_weight_versions;
  RunNoise noise;  // what else used the hosts' CPUs, and the steps' spread
};

// Refuses a device this host cannot give `ranks_here` ranks, before any rank
// starts: --device cuda needs a usable CUDA device and, since NCCL refuses
// two ranks of one communicator on the same GPU, one GPU per rank on this
// host. Throws pipetwin::Error saying which and why; nothing for cpu.
void check_device(Device device, int ranks_here);

// Refuses what the executor does not run (a layer that tensor parallelism
// cannot split, weight stashing across replicas), naming the option, layer
// and field. Throws pipetwin::Error.
void check_runnable(const models::Model& model, const schedule::Program& p);

// Runs this process's rank to the end. Rank 0 returns what it gathered, the
// other ranks nullopt. Throws pipetwin::Error naming the rank, step and action
// (or the peer) when anything goes wrong.
std::optional<RunResult> run_rank(const RunConfig& config, const RankEnv& env);

}  // namespace pipetwin::exec
