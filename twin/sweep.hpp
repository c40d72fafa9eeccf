// The sweep: every combination of schedules x recompute x micro-batch size x
// K x M x T x D into one CSV. The fast path evaluates configurations in this process
// on `jobs` threads; configurations with contention (or all of them with the
// SimGrid engine) go to SimGrid, `jobs` child processes at a time. Rows come
// in a fixed order; the file on disk is always whole (rewritten through a
// rename every few seconds), so an interrupted sweep resumes where it stopped,
// after checking that OUT.inputs names the same model, hardware and options
// and that every row taken back is one a sweep wrote.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "twin/predict.hpp"

namespace pipetwin::twin {

struct SweepSpec {
  std::string model, hardware, out;  // model spec file; preset or file; results CSV
  Engine engine = Engine::Auto;
  std::vector<int> ranks, microbatches, microbatch_sizes{1};
  std::vector<std::string> schedules, recompute{"none"};
  int virtual_stages = 2, jobs = 0;  // V applies to the generators with stages per rank; jobs 0: the cores
  int batch = 0;                     // > 0: a fixed mini-batch, micro-batch size batch / (M x D)
  std::vector<int> tensor{1}, data{1};  // T and D; the CSV's last columns
  // Applied to every row where they mean something: sequence parallelism
  // where T > 1, ZeRO (zero: its stage, 0 to 3) where D > 1.
  bool sequence_parallel = false, reshard_after_forward = true;
  int max_active_stages = 0;  // ZeRO-3 keeping the weights: FSDP's UNSHARD/RESHARD (ScenarioSpec's)
  // HSDP's groups of G replicas (ScenarioSpec::shard_group) with zero > 0 on
  // the rows whose D is above G (a row whose D it does not divide is an
  // error); a row with D at most G shards over all its D.
  int zero = 0, shard_group = 0;
  std::string partition = "auto", optimizer = "adam";
  std::string collective = "auto";  // the all-reduces' algorithm: auto, ring or tree
  double grad_bucket_mb = 0;         // every row's gradient buckets (ScenarioSpec::grad_bucket_mb)
  double grad_bucket_first_mb = 0;   // and the first one's size apart (ScenarioSpec::grad_bucket_first_mb)
  std::string precision;             // every row's (ScenarioSpec::precision); "": the model's
  int context_parallel = 0;          // every row's C (ScenarioSpec::context_parallel); D is the data groups
  std::string context_attention;
  int expert_parallel = 0;           // every row's E (ScenarioSpec::expert_parallel): an error row where it does not divide D x C
  int expert_tensor_parallel = 0;    // and its experts' tensor-parallel degree (ScenarioSpec::expert_tensor_parallel)
};

// Of the configurations evaluated now: those the fast path and SimGrid
// answered, and the rows by their status (ok, oom, error: the CSV's words).
struct SweepReport {
  std::size_t configurations = 0, resumed = 0, evaluated = 0, fast = 0, simgrid = 0;
  std::size_t ok = 0, out_of_memory = 0, errors = 0;
};

// Called every fraction of a second while the sweep runs, and once at the end.
using SweepProgress = std::function<void(std::size_t done, std::size_t total)>;

// One configuration's result, as its CSV row says it (a stream of them: each
// as it is computed, in no fixed order; resumed rows are not repeated).
struct SweepRow {
  std::string schedule, recompute;
  int ranks = 1, virtual_stages = 1, microbatches = 1, batch = 1, tensor = 1, data = 1;
  std::string status;  // ok, oom (does not fit), error (cannot be built or run)
  bool ran = false;    // the figures below are a prediction (false: the reason says why not)
  double step_time_s = 0, throughput_samples_per_s = 0, bubble_fraction = 0, max_stage_memory_gb = 0;
  std::string engine, reason;
};
using SweepRowCallback = std::function<void(const SweepRow& row)>;

// Throws pipetwin::Error naming the file or option at fault (a results file
// of other inputs, a damaged row, an uneven batch). `on_row` is called once
// per configuration computed, from one thread at a time.
SweepReport run_sweep(const SweepSpec& spec, const SweepProgress& progress = {}, const SweepRowCallback& on_row = {});

}  // namespace pipetwin::twin
