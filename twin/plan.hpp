// The plan: every way to train a model on N GPUs with a global batch B, as
// T (tensor) x K (pipeline) x D (data) with a micro-batch size b, M = B /
// (D x b) micro-batches, a schedule (and its V), a recompute policy, ZeRO's
// stage and sequence parallelism; each candidate predicted, the ones that do not
// fit in memory counted and left out, the rest ranked by throughput.
//
// Two passes: the timed evaluator (schedule/dry_run) answers every
// candidate; it is exact where the configuration provably has no contention
// (models/contention). The others (D > 1: the evaluator does not time the
// data-parallel reductions, and they share links) get each reduction timed
// in closed form, alone on its link (with_reductions, twin/plan_parts.hpp):
// an upper bound on throughput that counts every replica's reduction, so
// that one left exposed (K = 1 over many replicas) is not ranked above
// timed candidates as if it were free. Replaying them all in SimGrid would
// be exact but costs a child process each (thousands on a large plan);
// those among the best `top_sim` are replayed in SimGrid, in child
// processes, in rounds (a replayed figure only falls, which may bring others
// up) until the best `top_sim` hold none: their figures, and so the ranking's
// first `top_sim`, are exact. The rest keep the evaluator's bound, and say so.
// Upper bounds outside them do not change which are the best `top_sim`, so
// the parts of a sharded plan, merged, rank the same first `top_sim`.
//
// The enumeration is deterministic: a candidate's index names it, so that
// shard I of N (the candidates whose index mod N is I) can run on its own
// machine and `merge` joins the parts (twin/plan_csv.cpp).
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pipetwin::twin {

struct PlanSpec {
  std::string model, hardware;       // model spec file; preset or file
  int gpus = 0, global_batch = 0;    // N, B
  int max_pp = 0;                    // K at most (0: the model's layers)
  std::vector<int> microbatch_sizes{1, 2, 4, 8};
  std::vector<std::string> schedules{"1f1b", "interleaved-1f1b"};
  std::vector<int> virtual_stages{2, 4};  // V of the generators with several stages per rank
  std::vector<std::string> recompute{"none", "full"};
  bool also_without_sequence_parallel = false;  // where T > 1 (it is always tried on)
  // ZeRO's stages tried where D > 1 (ScenarioSpec::zero; D = 1: 0 alone),
  // and whether ZeRO-3 candidates free each layer's weights after its forward.
  std::vector<int> zero{0, 1};
  bool reshard_after_forward = true;
  // The ZeRO-3 candidates keeping their weights: FSDP's UNSHARD/RESHARD
  // with at most this many stages of a rank gathered (ScenarioSpec::max_active_stages); 0: none.
  int max_active_stages = 0;
  // HSDP's shard groups tried where ZeRO shards (ScenarioSpec::shard_group):
  // ZeRO's shards over groups of G of the D x C replicas, each where it
  // divides them and is fewer; 0: over all of them.
  std::vector<int> shard_group{0};
  std::string optimizer = "adam";
  // The arithmetics tried (ScenarioSpec::precision: bf16, fp16, fp8 for a
  // 16-bit model); empty: the model's alone.
  std::vector<std::string> precision;
  // Context-parallel degrees C tried (T x C x K x D = GPUs), and how a group
  // shares keys and values (ScenarioSpec::context_attention).
  std::vector<int> context{1};
  std::string context_attention;
  // Expert-parallel degrees E tried for a mixture of experts, each where it
  // divides the replicas (D x C) and the experts of a layer; with
  // expert_tensor 1 (ScenarioSpec::expert_tensor_parallel), where E is a
  // multiple of T and E / T divides the replicas.
  std::vector<int> expert{1};
  int expert_tensor = 0;
  double grad_bucket_mb = 0;  // every candidate's gradient buckets (ScenarioSpec::grad_bucket_mb)
  double grad_bucket_first_mb = 0;  // and the first one's size apart
  int top_sim = 8, jobs = 0;  // jobs 0: the cores
  int shard = 0, shards = 1;
};

// What a figure's engine was.
//   fast        the evaluator, exact (no contention)
//   simgrid     the SimGrid replay
//   fast-bound  the evaluator with the reductions in closed form, contention
//               not timed (an upper bound: not among the best top_sim)
struct Candidate {
  std::size_t index = 0;
  std::string schedule, recompute;
  int tensor = 1, pipeline = 1, data = 1, virtual_stages = 1, microbatches = 1, microbatch_size = 1;
  int context = 1;  // C: data = the data groups, each of C devices
  int expert = 1;   // E: the experts split over E of the D x C replicas
  bool sequence_parallel = false;
  int zero = 0;  // ZeRO's stage (PlanSpec::reshard_after_forward for 3)
  int shard_group = 0;  // HSDP: ZeRO's shards over groups of this many replicas; 0: all
  std::string precision;  // its arithmetic (PlanSpec::precision's), or the model's name of it
  // Its prediction. status: ok, oom (does not fit: left out of the
  // ranking), error (cannot be built or run: the reason says why).
  std::string status, engine, reason;
  double step_s = 0, samples_per_s = 0, tokens_per_s = 0, tflops_per_gpu = 0, bubble = 0;
  // Model FLOP utilization: tflops_per_gpu (the model's forward and backward
  // FLOPs, no recompute, as Megatron and PaLM count them) over the device's
  // peak dense rate in the model's precision.
  double mfu = 0;
  // Why: the slowest rank's tensor-parallel collectives per step (its
  // micro-batches' forward, backward and recompute), the data-parallel
  // reduction's exposed time (on the rank that ends the step: from its last
  // backward to the step's end, less its optimizer step), and the memory
  // headroom (the least over the ranks of capacity - peak).
  double tp_comm_s = 0, dp_exposed_s = 0, headroom_gb = 0;
  bool needs_simgrid = false;  // the evaluator found contention (not written)
};

struct PlanResult {
  std::string fingerprint, description;  // of the inputs: shards of one plan share them
  int shard = 0, shards = 1;
  std::size_t enumerated = 0;            // the full enumeration's candidates
  std::vector<Candidate> candidates;     // this shard's, in index order
  double wall_s = 0;
  // The hardware's calibration error (models::Hardware::prediction_error):
  // each figure is known within ±this share; 0: uncalibrated (or merged parts).
  double prediction_error = 0;
  std::size_t count(std::string_view status) const;
  std::size_t count_engine(std::string_view engine) const;  // of the ok ones
};

// A stream of the plan's results while it runs, each callback from one
// thread at a time: the evaluator's pass counted, and every candidate's
// figures as they are found, then again where a SimGrid replay replaces them.
struct PlanObserver {
  std::function<void(std::size_t done, std::size_t total)> progress;
  std::function<void(const Candidate& candidate)> on_candidate;
};

// Throws pipetwin::Error naming the option at fault (an unknown model or
// hardware, N or B that no candidate splits, a bad shard).
PlanResult run_plan(const PlanSpec& spec, const PlanObserver& observer = {});

// A candidate as `plan --json` lists it (`rank`: its place, best first).
nlohmann::json candidate_json(const Candidate& candidate, int rank);

// The ok candidates, best first (throughput, then index).
std::vector<const Candidate*> ranking(const PlanResult& result);

// "I/N" -> {I, N}; throws pipetwin::Error naming --shard.
std::pair<int, int> parse_shard(const std::string& text);

// The results CSV: two comment lines (the inputs' fingerprint and
// description; the shard and the enumeration's size), a header, one row per
// candidate. Written through a temporary and a rename.
void write_plan_csv(const std::string& path, const PlanResult& result);
PlanResult read_plan_csv(const std::string& path);  // throws naming the file and line
// The parts of one plan joined (as shard 0/1); refused, naming the file, when
// they come from other inputs, repeat a shard, lack one or count shards
// differently.
PlanResult merge_plans(const std::vector<std::string>& paths);

}  // namespace pipetwin::twin
