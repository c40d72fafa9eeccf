// `pipetwin sweep`: the options of a sweep (twin/sweep.hpp runs it), its
// progress bar on a terminal and its closing line.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "cli/scenario_options.hpp"
#include "models/collectives.hpp"
#include "models/partition.hpp"
#include "schedule/program.hpp"
#include "twin/engine.hpp"
#include "schedule/generators.hpp"
#include "twin/sweep.hpp"

namespace pipetwin::cli {
namespace {

struct Options {
  twin::SweepSpec spec;
  std::string engine = "auto";
};

void draw_bar(std::size_t done, std::size_t total) {
  const int width = 40;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done,
               total);
  std::fflush(stderr);
}

int run(Options& o) {
  o.spec.engine = twin::parse_engine(o.engine);
  const bool bar = ::isatty(2) && !std::getenv("CI");
  const auto r = bar ? twin::run_sweep(o.spec, draw_bar) : twin::run_sweep(o.spec);
  if (bar) std::fprintf(stderr, "\n");
  std::fprintf(stderr,
               "sweep: %zu configurations (%zu resumed, %zu evaluated now: %zu on the fast path, %zu in SimGrid; "
               "%zu fit, %zu out of memory, %zu not runnable (status ok, oom, error)) -> %s\n",
               r.configurations, r.resumed, r.evaluated, r.fast, r.simgrid, r.ok, r.out_of_memory, r.errors,
               o.spec.out.c_str());
  return 0;
}

}  // namespace

Run add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto& spec = o->spec;
  auto* cmd = app.add_subcommand("sweep", "Predict every schedule x recompute x micro-batch size x K x M x T x D combination into one CSV");
  cmd->add_option("--model", spec.model, "Model spec (YAML, or a Hugging Face config.json)")->required();
  cmd->add_option("--hardware", spec.hardware, "Hardware preset name or YAML file")->required();
  cmd->add_option("--ranks,-k", spec.ranks, "Ranks K, comma-separated")->required()->delimiter(',')->check(kPositive);
  cmd->add_option("--microbatches,-m", spec.microbatches, "Micro-batches M, comma-separated")
      ->required()
      ->delimiter(',')
      ->check(kPositive);
  std::vector<std::string> names;
  for (const auto& g : schedule::generators()) names.emplace_back(g.name);
  cmd->add_option("--schedules,-s", spec.schedules, "Schedules, comma-separated")->required()->delimiter(',')->check(CLI::IsMember(names));
  cmd->add_option("--recompute", spec.recompute, "Recompute choices, comma-separated: none, full, except-last, selective, uniform[:N], block:N, op")
      ->delimiter(',')
      ->check(kRecomputeChoice)
      ->capture_default_str();
  cmd->add_option("--microbatch-size", spec.microbatch_sizes, "Samples per micro-batch, comma-separated (batch = M x this)")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--tensor,-t", spec.tensor, "Tensor-parallel degrees T, comma-separated (the CSV's column tensor)")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--data,-d", spec.data, "Data-parallel replicas D, comma-separated (the CSV's column data; batch = M x micro-batch size x D)")
      ->delimiter(',')
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", spec.sequence_parallel, "Sequence parallelism on every row with T > 1");
  add_zero_options(cmd, spec.zero, spec.reshard_after_forward, "On every row with D > 1: ");
  cmd->add_option("--max-active-stages", spec.max_active_stages,
                  "With --zero 3 --reshard-after-forward off: FSDP's UNSHARD/RESHARD on every ZeRO-3 row, at most N "
                  "stages of a rank gathered at a time (3 in PyTorch's runtime); 0: none")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--shard-group", spec.shard_group,
                  "With --zero: HSDP, ZeRO's shards over groups of G replicas on the rows with D > G (G must divide "
                  "their D); rows with D at most G shard over all of D")
      ->check(CLI::NonNegativeNumber);
  add_precision_option(cmd, spec.precision, "On every row: ");
  add_context_options(cmd, spec.context_parallel, spec.context_attention);
  add_expert_option(cmd, spec.expert_parallel, spec.expert_tensor_parallel);
  cmd->add_option("--batch", spec.batch, "A fixed mini-batch instead: micro-batch size batch / (M x D) (GPipe's Table 2 setting)")
      ->check(kPositive)
      ->excludes("--microbatch-size");
  cmd->add_option("--virtual,-v", spec.virtual_stages, "V for the generators with several stages per rank (interleaved-1f1b, interleaved-zb, looped-bfs)")->check(kPositive)->capture_default_str();
  cmd->add_option("--partition", spec.partition, "auto, uniform or parameters")
      ->check(CLI::IsMember(prepend("auto", models::method_names())))
      ->capture_default_str();
  cmd->add_option("--optimizer", spec.optimizer, "Optimizer")->check(CLI::IsMember(models::optimizer_names()))->capture_default_str();
  cmd->add_option("--collective", spec.collective,
                  "All-reduce algorithm of every row's collectives: ring, tree or auto (the faster closed form)")
      ->check(CLI::IsMember(models::collective_algorithm_names()))
      ->capture_default_str();
  cmd->add_option("--grad-bucket-mb", spec.grad_bucket_mb,
                  "With D > 1: gradient buckets of this many MB, reduced during the last backward; 0: one reduction after it")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--grad-bucket-first-mb", spec.grad_bucket_first_mb,
                  "With --grad-bucket-mb: the first bucket's size apart (DDP's 1 MiB: 1.048576); 0: as the others")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--engine", o->engine, "auto (fast path unless contention), simgrid or fast")
      ->check(CLI::IsMember(twin::engine_names()))
      ->capture_default_str();
  cmd->add_option("--out,-o", spec.out,
                  "Results CSV (resumed if it exists and OUT.inputs shows the same model, hardware and options)")
      ->required();
  cmd->add_option("--jobs,-j", spec.jobs, "Threads / SimGrid processes (default: cores)")->check(kPositive);
  return [o] { return run(*o); };
}

}  // namespace pipetwin::cli
