// add_scenario_options: the options of one configuration, onto a ScenarioSpec.
#include "cli/scenario_options.hpp"

#include "cli/commands.hpp"
#include "models/partition.hpp"
#include "schedule/program.hpp"
#include "schedule/generators.hpp"

namespace pipetwin::cli {

std::string generator_names() {
  std::string names;
  for (const auto& g : schedule::generators()) names += (names.empty() ? "" : ", ") + std::string(g.name);
  return names;
}

CLI::Validator schedule_check() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (twin::is_schedule_file(value)) return {};
        for (const auto& g : schedule::generators()) {
          if (g.name == value) return {};
        }
        return "'" + value + "' is neither a schedule generator (" + generator_names() + ") nor a schedule file";
      },
      "GENERATOR|FILE");
}

void add_zero_options(CLI::App* cmd, int& zero, bool& reshard_after_forward, const std::string& where) {
  auto* level = cmd->add_option("--zero", zero,
                                where + "ZeRO's stage over the data group: 0 none (default), 1 the optimizer state sharded, "
                                        "2 and the gradients (reduce-scattered per micro-batch), 3 and the weights (FSDP2: "
                                        "each layer all-gathered before its forward and backward, one ahead)")
                    ->check(CLI::Range(0, 3));
  cmd->add_flag_callback("--zero1", [&zero] { zero = 1; }, where + "the same as --zero 1 (ZeRO-1)")->excludes(level);
  add_reshard_option(cmd, reshard_after_forward, "With --zero 3: ");
}

void add_reshard_option(CLI::App* cmd, bool& reshard_after_forward, const std::string& where) {
  cmd->add_option_function<std::string>(
         "--reshard-after-forward",
         [&reshard_after_forward](const std::string& v) { reshard_after_forward = v == "on"; },
         where + "on frees each layer's gathered weights after its forward and gathers them again for its backward "
                 "(FSDP2's default); off gathers a stage's weights once per step and keeps them (torchtitan's choice "
                 "under a pipeline)")
      ->check(CLI::IsMember({"on", "off"}));
}

void add_context_options(CLI::App* cmd, int& context, std::string& attention) {
  cmd->add_option("--context,-c", context,
                  "Context-parallel degree C: each sample's sequence split over C devices in load-balanced causal "
                  "chunks, each data-parallel replica a group of C (default 1; devices T x C x K x D)")
      ->check(kPositive);
  cmd->add_option("--context-attention", attention,
                  "With C > 1: how the group shares keys and values: ring (passed around, under the attention of the "
                  "block held; default) or all-gather (gathered before each attention, Llama 3's)")
      ->check(CLI::IsMember({"ring", "all-gather"}));
}

void add_expert_option(CLI::App* cmd, int& expert, int& expert_tensor) {
  cmd->add_option("--expert,-e", expert,
                  "Expert-parallel degree E for a mixture of experts: its routed experts split over E consecutive "
                  "data-parallel replicas (E divides D x C), tokens traded by all-to-all (default 1)")
      ->check(kPositive);
  cmd->add_option("--expert-tensor", expert_tensor,
                  "The experts' tensor-parallel degree: T (default, Megatron-LM's) or 1 (the experts whole on each "
                  "device, the expert group spread over the tensor group's devices too: E a multiple of T)")
      ->check(CLI::NonNegativeNumber);
}

void add_precision_option(CLI::App* cmd, std::string& precision, const std::string& where) {
  cmd->add_option("--precision", precision,
                  where + "The model's arithmetic instead of its spec's, for a 16-bit model: bf16, fp16, or fp8 (its "
                          "blocks' products with their weights in FP8 at the device's peak_flops_fp8, current scaling; "
                          "tensors kept in BF16)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8"}));
}

void add_scenario_options(CLI::App* cmd, twin::ScenarioSpec& o) {
  cmd->add_option("--model", o.model, "Model spec (YAML, or a Hugging Face config.json)")->required();
  cmd->add_option("--hardware", o.hardware, "Hardware preset name or YAML file")->required();
  cmd->add_option("--schedule,-s", o.schedule,
                  "A schedule generator (" + generator_names() +
                      "), or a schedule file (pipetwin text or JSON, PyTorch CSV) that gives K, V, M, the placement "
                      "and the recompute policy itself")
      ->required()
      ->check(schedule_check());
  cmd->add_option("--ranks,-k", o.ranks, "Ranks K (with a generator)")->check(kPositive);
  cmd->add_option("--microbatches,-m", o.microbatches, "Micro-batches M (with a generator)")->check(kPositive);
  cmd->add_option("--virtual,-v", o.virtual_stages, "Stages per rank V (default 1)")->check(kPositive);
  cmd->add_option("--tensor,-t", o.tensor_parallel,
                  "Tensor-parallel degree T: each pipeline rank is a group of T devices that split every layer "
                  "(default 1)")
      ->check(kPositive);
  cmd->add_option("--data,-d", o.data_parallel,
                  "Data-parallel replicas D of the pipeline, each taking batch / D (default 1)")
      ->check(kPositive);
  cmd->add_flag("--sequence-parallel", o.sequence_parallel,
                "With T > 1: norms and dropouts split over the group too (all-gather and reduce-scatter)");
  add_context_options(cmd, o.context_parallel, o.context_attention);
  add_expert_option(cmd, o.expert_parallel, o.expert_tensor_parallel);
  add_zero_options(cmd, o.zero, o.reshard_after_forward, "With D > 1: ");
  cmd->add_option("--max-active-stages", o.max_active_stages,
                  "With --zero 3 --reshard-after-forward off: FSDP's UNSHARD and RESHARD actions as PyTorch's runtime "
                  "places them in its multi-stage schedules (max_active_stages, 3 there): at most N stages of a rank "
                  "gathered at a time, each UNSHARD an all-gather the stage's next compute waits for; 0: each stage "
                  "gathered at its first forward and kept to its step (default), or the schedule file's own")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shard-group", o.shard_group,
                  "With --zero: HSDP, ZeRO's shards over groups of G consecutive replicas (G divides D), replicated "
                  "across the D / G groups; 0: one group of all D (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--grad-bucket-mb", o.grad_bucket_mb,
                  "With D > 1: gradient buckets of this many MB, each reduced while the last backward produces the "
                  "rest (DDP's bucket_cap_mb, Megatron-LM's --overlap-grad-reduce); 0: one reduction after it (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--grad-bucket-first-mb", o.grad_bucket_first_mb,
                  "With --grad-bucket-mb: the first bucket's size apart (DDP's first bucket is 1 MiB: 1.048576); 0: "
                  "the same as the others (default)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--batch", o.batch, "Samples per mini-batch, all replicas (a multiple of M x D; default M x D)")
      ->check(kPositive);
  cmd->add_option("--recompute", o.recompute, "Re-materialization: none, full, except-last, selective, uniform[:N], block:N, op (default none, or the schedule file's)")
      ->check(kRecomputeChoice);
  cmd->add_option("--partition", o.partition,
                  "auto (optimal, the default), uniform, parameters, a Megatron-LM layout (--pipeline-model-parallel-layout: "
                  "'Et*3|t*4|t*4|t*3,L'), or a file: a schedule with a partition line, or begin:end ranges");
  add_precision_option(cmd, o.precision, "");
  cmd->add_option("--optimizer", o.optimizer, "Optimizer (its state counts in memory)")
      ->check(CLI::IsMember(models::optimizer_names()))
      ->capture_default_str();
  // A generator needs the shape; a schedule file has its own.
  cmd->parse_complete_callback([cmd, &o] {
    if (twin::is_schedule_file(o.schedule)) return;
    for (const char* name : {"--ranks", "--microbatches"}) {
      if (cmd->count(name) == 0) throw CLI::RequiredError(std::string(name) + " (with a schedule generator)");
    }
  });
}

}  // namespace pipetwin::cli
