// `pipetwin plan`: the T x K x D x b x schedule x recompute candidates of a
// model on N GPUs at a global batch, predicted and ranked (twin/plan.hpp);
// `pipetwin merge`: the parts of a sharded plan joined, ranked the same way.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/scenario_options.hpp"
#include "models/partition.hpp"
#include "schedule/program.hpp"
#include "schedule/generators.hpp"
#include "twin/plan.hpp"

namespace pipetwin::cli {
namespace {

struct Output {
  int top = 5;
  bool json = false;
};

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

// The ZeRO column: the stage, and under HSDP "/G" its shard group's size.
std::string zero_words(const twin::Candidate& c) {
  return std::to_string(c.zero) + (c.shard_group > 0 ? "/" + std::to_string(c.shard_group) : "");
}

std::string engine_words(const std::string& engine) {
  if (engine == "fast") return "evaluator (exact: no contention)";
  if (engine == "simgrid") return "SimGrid";
  return "evaluator, the data-parallel reductions in closed form without contention (an upper bound; not among the best "
         "--top-sim)";
}

void print_json(const twin::PlanResult& r, const std::vector<const twin::Candidate*>& best, const Output& o) {
  nlohmann::json j = {{"inputs", {{"fingerprint", r.fingerprint}, {"description", r.description}}},
                      {"shard", std::to_string(r.shard) + "/" + std::to_string(r.shards)},
                      {"candidates",
                       {{"enumerated", r.enumerated},
                        {"evaluated", r.candidates.size()},
                        {"fit", r.count("ok")},
                        {"out_of_memory", r.count("oom")},
                        {"errors", r.count("error")}}},
                      {"engines",
                       {{"fast", r.count_engine("fast")},
                        {"simgrid", r.count_engine("simgrid")},
                        {"fast_bound", r.count_engine("fast-bound")}}},
                      {"wall_s", r.wall_s},
                      {"top", nlohmann::json::array()}};
  if (r.prediction_error > 0) j["prediction_error"] = r.prediction_error;
  for (std::size_t i = 0; i < best.size() && static_cast<int>(i) < o.top; ++i) {
    auto c = twin::candidate_json(*best[i], static_cast<int>(i) + 1);
    if (r.prediction_error > 0) {  // the interval the hardware's calibration gives
      c["throughput_samples_per_s_low"] = best[i]->samples_per_s * (1 - r.prediction_error);
      c["throughput_samples_per_s_high"] = best[i]->samples_per_s * (1 + r.prediction_error);
    }
    j["top"].push_back(c);
  }
  std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void print_text(const twin::PlanResult& r, const std::vector<const twin::Candidate*>& best, const Output& o) {
  std::printf("plan: %s\n", r.description.c_str());
  std::printf("candidates: %zu enumerated, %zu evaluated%s: %zu fit, %zu out of memory, %zu not runnable (status ok, oom, error)\n",
              r.enumerated,
              r.candidates.size(),
              r.shards > 1 ? (" (shard " + std::to_string(r.shard) + "/" + std::to_string(r.shards) + ")").c_str() : "",
              r.count("ok"), r.count("oom"), r.count("error"));
  std::printf("figures: %zu from the evaluator (exact), %zu from SimGrid, %zu from the evaluator as an upper bound%s\n",
              r.count_engine("fast"), r.count_engine("simgrid"), r.count_engine("fast-bound"),
              r.wall_s > 0 ? (" (" + std::to_string(r.wall_s).substr(0, 5) + " s)").c_str() : "");
  if (r.prediction_error > 0) {
    std::printf("interval: the hardware's calibration predicted the runs it did not fit within %.1f%%: each figure "
                "below within ±%.1f%%\n", 100 * r.prediction_error, 100 * r.prediction_error);
  } else {
    std::printf("interval: none (the hardware is not calibrated by calibrate --runs: its figures are the preset's)\n");
  }
  if (best.empty()) {
    std::printf("no candidate fits in memory\n");
    return;
  }
  std::printf("%3s %2s %2s %3s %3s %3s %2s %4s %2s  %-18s %-9s %-3s %-4s %-4s %10s %10s %11s %6s %9s  %s\n", "#", "T", "C",
              "K", "D", "E", "V", "M", "b", "schedule", "recompute", "SP", "ZeRO", "prec", "samples/s", "tokens/s", "TFLOP/s/GPU",
              "MFU", "step (s)", "engine");
  for (std::size_t i = 0; i < best.size() && static_cast<int>(i) < o.top; ++i) {
    const auto& c = *best[i];
    const std::string tokens = c.tokens_per_s > 0 ? std::to_string(static_cast<long long>(c.tokens_per_s + 0.5)) : "-";
    std::printf("%3zu %2d %2d %3d %3d %3d %2d %4d %2d  %-18s %-9s %-3s %-4s %-4s %10.2f %10s %11.1f %6s %9.4f  %s\n", i + 1,
                c.tensor, c.context, c.pipeline, c.data, c.expert, c.virtual_stages, c.microbatches, c.microbatch_size, c.schedule.c_str(),
                c.recompute.c_str(), c.sequence_parallel ? "on" : "off", zero_words(c).c_str(),
                c.precision.empty() ? "-" : c.precision.c_str(), c.samples_per_s,
                tokens.c_str(), c.tflops_per_gpu, percent(c.mfu).c_str(), c.step_s, c.engine.c_str());
    std::printf("    why: bubble %s, TP collectives %.3g s/step, DP reduction exposed %.3g s, memory headroom %.1f GB; %s\n",
                percent(c.bubble).c_str(), c.tp_comm_s, c.dp_exposed_s, c.headroom_gb, engine_words(c.engine).c_str());
  }
}

void report(const twin::PlanResult& r, const Output& o) {
  const auto best = twin::ranking(r);
  if (o.json) {
    print_json(r, best, o);
  } else {
    print_text(r, best, o);
  }
}

// Context and expert parallelism: the degrees tried.
void add_group_options(CLI::App* cmd, twin::PlanSpec& s) {
  cmd->add_option("--context,-c", s.context,
                  "Context-parallel degrees C tried, comma-separated (T x C x K x D = GPUs; C splits each sample's "
                  "sequence)")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--context-attention", s.context_attention, "With C > 1: ring (default) or all-gather, as in simulate")
      ->check(CLI::IsMember({"ring", "all-gather"}));
  cmd->add_option("--expert,-e", s.expert,
                  "Expert-parallel degrees E tried for a mixture of experts, comma-separated, each where it divides "
                  "D x C and a layer's experts")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--expert-tensor", s.expert_tensor,
                  "The experts' tensor-parallel degree on every candidate: T (default) or 1 (E then a multiple of T), as in simulate")
      ->check(CLI::IsMember({0, 1}));
}

void add_output_options(CLI::App* cmd, Output& o) {
  cmd->add_option("--top", o.top, "Candidates shown, best first")->check(kPositive)->capture_default_str();
  cmd->add_flag("--json", o.json, "Machine-readable ranking");
}

struct PlanOptions {
  twin::PlanSpec spec;
  Output output;
  std::string out, shard;
};

}  // namespace

Run add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto& s = o->spec;
  auto* cmd = app.add_subcommand(
      "plan", "Rank every T x K x D x micro-batch size x schedule x recompute way to train a model on N GPUs at a global batch");
  cmd->add_option("--model", s.model, "Model spec (YAML, or a Hugging Face config.json)")->required();
  cmd->add_option("--hardware", s.hardware, "Hardware preset name or YAML file")->required();
  cmd->add_option("--gpus,-n", s.gpus, "GPUs N = T x K x D")->required()->check(kPositive);
  cmd->add_option("--global-batch,-b", s.global_batch, "Samples per step, all replicas: M x micro-batch size x D")
      ->required()
      ->check(kPositive);
  cmd->add_option("--microbatch-sizes", s.microbatch_sizes, "Micro-batch sizes tried, comma-separated")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  std::vector<std::string> names;
  for (const auto& g : schedule::generators()) names.emplace_back(g.name);
  cmd->add_option("--schedules,-s", s.schedules, "Schedules tried, comma-separated")
      ->delimiter(',')
      ->check(CLI::IsMember(names))
      ->capture_default_str();
  cmd->add_option("--virtual,-v", s.virtual_stages,
                  "V tried with the generators with several stages per rank (K x V at most the layers), comma-separated")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--recompute", s.recompute, "Recompute choices tried, comma-separated: none, full, except-last, selective, uniform[:N], block:N, op")
      ->delimiter(',')
      ->check(kRecomputeChoice)
      ->capture_default_str();
  cmd->add_option("--max-pp", s.max_pp, "K at most (default: the model's layers)")->check(kPositive);
  cmd->add_flag("--also-without-sequence-parallel", s.also_without_sequence_parallel,
                "With T > 1, try sequence parallelism off too (it is always tried on)");
  cmd->add_option("--zero", s.zero,
                  "ZeRO's stages tried where D > 1, comma-separated: 0 none, 1 the optimizer state, 2 and the gradients, "
                  "3 and the weights (FSDP2)")
      ->delimiter(',')
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  add_reshard_option(cmd, s.reshard_after_forward, "The ZeRO-3 candidates: ");
  cmd->add_option("--max-active-stages", s.max_active_stages,
                  "The ZeRO-3 candidates keeping their weights (--reshard-after-forward off): FSDP's UNSHARD/RESHARD as "
                  "PyTorch's runtime places them, at most N stages of a rank gathered at a time (3 in PyTorch); 0: none")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shard-group", s.shard_group,
                  "HSDP's shard groups tried where ZeRO shards, comma-separated: ZeRO's shards over groups of G of the "
                  "D x C replicas, each G fewer than them that divides them (0: over all)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  add_group_options(cmd, s);
  cmd->add_option("--precision", s.precision,
                  "Arithmetics tried, comma-separated, for a 16-bit model: bf16, fp16, fp8 (its blocks' products in FP8 "
                  "at the device's peak_flops_fp8); default: the model's")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "fp16", "fp8"}));
  cmd->add_option("--optimizer", s.optimizer, "Optimizer")->check(CLI::IsMember(models::optimizer_names()))->capture_default_str();
  cmd->add_option("--grad-bucket-mb", s.grad_bucket_mb,
                  "With D > 1: gradient buckets of this many MB, reduced during the last backward; 0: one reduction after it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--grad-bucket-first-mb", s.grad_bucket_first_mb,
                  "With --grad-bucket-mb: the first bucket's size apart (DDP's 1 MiB: 1.048576); 0: as the others")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-sim", s.top_sim,
                  "The best N candidates' figures exact: those with contention (D > 1) among them replayed in SimGrid, in rounds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--jobs,-j", s.jobs, "Threads / SimGrid processes (default: cores)")->check(kPositive);
  cmd->add_option("--shard", o->shard, "I/N: only the candidates whose index mod N is I (merge joins the parts)");
  cmd->add_option("--out,-o", o->out, "Every evaluated candidate as CSV (pipetwin merge reads it)");
  add_output_options(cmd, o->output);
  return [o] {
    if (!o->shard.empty()) std::tie(o->spec.shard, o->spec.shards) = twin::parse_shard(o->shard);
    const auto result = twin::run_plan(o->spec);
    if (!o->out.empty()) twin::write_plan_csv(o->out, result);
    report(result, o->output);
    return 0;
  };
}

Run add_merge_command(CLI::App& app) {
  struct MergeOptions {
    std::string out;
    std::vector<std::string> parts;
    Output output;
  };
  auto o = std::make_shared<MergeOptions>();
  auto* cmd = app.add_subcommand("merge", "Join the parts of a sharded plan (plan --shard I/N -o PART.csv) and rank them");
  cmd->add_option("out", o->out, "The joined CSV")->required();
  cmd->add_option("parts", o->parts, "Every part, one per shard")->required();
  add_output_options(cmd, o->output);
  return [o] {
    const auto merged = twin::merge_plans(o->parts);
    twin::write_plan_csv(o->out, merged);
    report(merged, o->output);
    return 0;
  };
}

}  // namespace pipetwin::cli
