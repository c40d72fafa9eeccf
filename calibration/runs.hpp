// Whole training runs and their measured (or published) speed: what
// `pipetwin calibrate --runs` fits the device's curves to. A run is a
// configuration (model, hardware, T, K, D, V, M, micro-batch, schedule,
// recompute, sequence parallelism, ZeRO-1) and one figure: seconds per step,
// or teraFLOP/s per GPU with the FLOPs formula that counted it.
//
// Read from a CSV (read_runs_csv), from Megatron-LM's training log (its
// printed arguments and "elapsed time per iteration (ms)" lines) or from
// torchtitan's (its TOML job file and its "tps"/"tflops" lines).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipetwin::calibration {

// How a published TFLOP/s per GPU counted its FLOPs per step (B sequences
// of s tokens, l layers, h hidden, V vocabulary):
//   megatron  Narayanan et al. (SC'21) Appendix, with full recompute:
//             96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); Megatron-LM's
//             num_floating_point_operations without recompute: 3/4 of that
//             for GPT (its own printed "TFLOP/s/GPU")
//   model     6·N·tokens + 12·l·h·s·tokens (PaLM's model FLOPs, torchtitan's
//             "tflops"), N the parameters without the embedding
enum class FlopsFormula { Megatron, MegatronNoRecompute, Model };
std::string_view formula_name(FlopsFormula formula);  // megatron, megatron-no-recompute, model

struct MeasuredRun {
  std::string name;    // a label: the CSV's `name` column, or the log's file name
  std::string source;  // "FILE:LINE" (or the file), for errors
  // The model: a spec file (YAML or Hugging Face config.json), relative paths
  // taken from the CSV's folder, or a spec's text (model_text) that a log's
  // arguments give.
  std::string model, model_text;
  std::string hardware;  // a preset or a file
  int tensor = 1, pipeline = 1, data = 1, virtual_stages = 1;
  int context = 1;          // C: each data-parallel replica a group of C splitting the sequence
  int expert = 1;           // E: a mixture's experts split over E of the D x C replicas
  int expert_tensor = 0;    // the experts' tensor-parallel degree: 0 (T) or 1 (ScenarioSpec::expert_tensor_parallel)
  int microbatches = 0;     // M per replica; 0: global_batch / (D · microbatch_size)
  int microbatch_size = 1;  // b
  int global_batch = 0;     // sequences per step
  std::string schedule = "1f1b";  // interleaved-1f1b where V > 1 unless given
  std::string recompute = "none"; // a recompute choice (models/recompute.hpp)
  // How the layers were split: uniform, parameters, a file, or "" (the
  // twin's own partition on the hardware the fit starts from); kept for
  // every prediction of the run, so that only the device's curve varies.
  std::string partition;
  bool sequence_parallel = false;
  // ZeRO's stage over the data group (0 to 3: ScenarioSpec::zero), HSDP's
  // shard group (0: all D), and with ZeRO-3 whether a unit's gathered
  // weights are freed after its forward.
  int zero = 0, shard_group = 0;
  bool reshard_after_forward = true;
  std::string precision;  // the model's arithmetic where not its spec's (ScenarioSpec::precision)
  // The figure: one of the two.
  double step_s = 0;
  double tflops_per_gpu = 0;
  FlopsFormula formula = FlopsFormula::Megatron;
  // fit: fitted; predict: held out; empty: as `--fit` says.
  std::string role;
  int gpus() const { return tensor * pipeline * data * context; }
};

// A CSV with a header row; `#` lines are comments. Columns (any order):
//   name, model, hardware, tensor, pipeline, data, virtual, microbatches,
//   microbatch_size, global_batch, schedule, recompute, sequence_parallel,
//   zero1 (a flag: zero 1) or zero (0 to 3), precision (bf16, fp16, fp8), context (C), expert (E), expert_tensor (1 or T),
//   partition, step_s, tflops_per_gpu, formula, role
// model, hardware and one of step_s and tflops_per_gpu are required; the
// others default as MeasuredRun does; gpus may stand in for data (data =
// gpus / (tensor · pipeline · context)). Throws pipetwin::Error naming the file, the
// line and the column of anything malformed.
std::vector<MeasuredRun> read_runs_csv(const std::string& path);

// Runs from a file of either kind, told apart by content: a Megatron-LM log
// (its arguments block) is one run on `hardware`; anything else is read as
// a runs CSV. Throws pipetwin::Error naming the file.
std::vector<MeasuredRun> read_runs(const std::string& path, const std::string& hardware);

// Megatron-LM's stdout: the "arguments" block its rank 0 prints (num_layers,
// hidden_size, ffn_hidden_size, num_attention_heads, num_query_groups,
// seq_length, padded_vocab_size, swiglu, normalization, ...,
// tensor/pipeline_model_parallel_size, micro_batch_size, global_batch_size,
// recompute_granularity, recompute_method, recompute_num_layers,
// sequence_parallel, use_distributed_optimizer) as a model spec and a
// configuration, and the median of its "elapsed time per iteration (ms)"
// values after the first `skip` iterations.
MeasuredRun read_megatron_log(const std::string& path, const std::string& hardware, int skip = 2);

// torchtitan: its job TOML ([model], [training], [parallelism],
// [activation_checkpoint]) and its training log's "tps" lines (tokens per
// second per GPU, the median after the first `skip` steps); the model's
// shape from the TOML's model flavor is not known here, so `model` names a
// spec file for it.
MeasuredRun read_torchtitan_run(const std::string& toml_path, const std::string& log_path, const std::string& model,
                                const std::string& hardware, int skip = 2);

}  // namespace pipetwin::calibration
