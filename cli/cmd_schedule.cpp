// `pipetwin schedule`: generate a schedule, lower it, validate it, print it.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.hpp"
#include "schedule/program.hpp"
#include "models/families.hpp"
#include "models/partition.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/grid.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::cli {
namespace {

namespace ps = pipetwin::schedule;

struct Options {
  std::string name, from;
  int ranks = 0, microbatches = 0, virtual_stages = 1;
  std::string recompute;  // "": none, or the file's
  std::string format = "grid";
  std::string out;
  bool compute_only = false;
  bool json = false;
  bool list = false;
  std::string model, hardware, partition = "optimal";
  int microbatch_size = 1;
  int max_active_stages = 0;  // FSDP's UNSHARD/RESHARD (schedule::insert_unshards); 0: none
};

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * x);
  return buf;
}

std::string grid_report(const ps::ValidationReport& report) {
  const ps::Program& p = report.program;
  const auto& t = report.dry_run.timeline;
  const int K = p.num_ranks, M = p.num_microbatches;
  std::ostringstream out;
  out << (p.schedule.empty() ? "imported" : p.schedule) << ": K=" << K << " ranks, V=" << p.stages_per_rank << ", M=" << M
      << " micro-batches, recompute " << ps::recompute_name(p.recompute)
      << "\nunit-time dry run: every compute action (F B I W R) takes 1 step, transfers 0\n\n";
  out << ps::format_time_grid(p, t) << "\n";
  out << "steps: " << t.makespan() << "\n";
  out << "bubble: " << percent(t.bubble_fraction()) << " overall";
  if (p.schedule == "gpipe" || p.schedule == "1f1b") {
    out << " (analytic (K-1)/(M+K-1) = " << percent(static_cast<double>(K - 1) / (M + K - 1)) << ")";
  }
  out << "\nidle per rank:";
  for (const double idle : t.idle_fractions()) out << " " << percent(idle);
  out << "\npeak stashed micro-batches per stage:";
  for (const auto& m : report.memory) {
    out << " " << m.peak_activations;
    if (m.peak_inputs > 0) out << "+" << m.peak_inputs << "in";
  }
  if (p.schedule == "pipedream") {
    out << "\nweight versions per stage:";
    for (const auto& m : report.memory) out << " " << m.weight_versions;
  }
  out << "\n";
  return out.str();
}

// --list: one block per generator (or a JSON list with --json).
int list_generators(bool json) {
  if (json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& g : ps::generators()) {
      all.push_back({{"name", g.name}, {"summary", g.summary}, {"virtual_stages", g.virtual_stages},
                     {"fixed_stages_per_rank", g.fixed_stages_per_rank}, {"constraints", g.constraints},
                     {"bubble", g.bubble}, {"memory", g.memory}});
    }
    std::printf("%s\n", all.dump(1).c_str());
    return 0;
  }
  for (const auto& g : ps::generators()) {
    const auto line = [](const char* what, std::string_view text) {
      std::printf("  %-12s %.*s\n", what, static_cast<int>(text.size()), text.data());
    };
    std::printf("%.*s\n", static_cast<int>(g.name.size()), g.name.data());
    line("what", g.summary);
    line("shape", g.constraints);
    line("bubble", g.bubble);
    line("stash", g.memory);
  }
  std::printf("closed forms on uniform stages with free transfers; a schedule file (pipetwin text or JSON, PyTorch CSV) "
              "is taken wherever a generator's name is (simulate, run, partition: --schedule FILE)\n");
  return 0;
}

// --from: a schedule file (pipetwin text or JSON, PyTorch CSV), its
// recompute policy set by --recompute where the file leaves it open.
ps::Program imported(const Options& o) {
  std::vector<std::string> notes;
  ps::Program program = ps::read_program(o.from, &notes);
  for (const auto& n : notes) std::fprintf(stderr, "%s: %s\n", o.from.c_str(), n.c_str());
  if (!o.recompute.empty()) twin::settle_recompute(program, ps::parse_recompute(o.recompute), o.recompute, o.from);
  if (!program.partition.empty() && !o.model.empty()) {
    throw Error("--model contradicts the schedule file " + o.from + ", which holds its own partition line");
  }
  return program;
}

int run(const Options& o) {
  ps::Program program = o.from.empty() ? ps::generate(o.name, {o.ranks, o.microbatches, o.virtual_stages,
                                                               ps::parse_recompute(o.recompute.empty() ? "none" : o.recompute)})
                                       : imported(o);
  if (!o.model.empty()) {
    // The partition flows into the Program: stage s holds these layers.
    models::PartitionRequest r;
    r.program = ps::lower(program);
    r.microbatch_size = o.microbatch_size;
    const auto model = models::load_model(o.model);
    program.partition = models::partition_model(model, models::load_hardware(o.hardware), r,
                                                models::parse_method(o.partition))
                            .ranges();
  }
  if (!o.compute_only) program = ps::lower(std::move(program));
  if (o.max_active_stages > 0) program = ps::insert_unshards(std::move(program), o.max_active_stages);
  const auto report = o.from.empty() ? ps::validate(program) : twin::validate_file(program, o.from);
  const std::string format = o.json ? "json" : o.format;
  std::vector<std::string> left_out;
  const std::string text = format == "grid"          ? grid_report(report)
                           : format == "pytorch-csv" ? ps::to_pytorch_csv(program, &left_out)
                                                     : ps::format_program(program, ps::parse_format(format));
  for (const auto& what : left_out) std::fprintf(stderr, "pytorch-csv: left out %s\n", what.c_str());
  if (o.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    ps::write_file_atomic(o.out, text);
    std::fprintf(stderr, "wrote %s (%s)\n", o.out.c_str(), report.summary().c_str());
  }
  return 0;
}

}  // namespace

Run add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("schedule", "Generate a pipeline schedule, validate it and print it");
  std::vector<std::string> names;
  for (const auto& g : ps::generators()) names.emplace_back(g.name);
  auto* generator = cmd->add_option("--schedule,-s", o->name, "Schedule generator")->check(CLI::IsMember(names));
  cmd->add_option("--from", o->from,
                  "A schedule file (pipetwin text or JSON, PyTorch CSV) in place of a generator: drawn, validated and "
                  "written in any format")
      ->check(CLI::ExistingFile)
      ->excludes(generator);
  cmd->add_option("--ranks,-k", o->ranks, "Pipeline ranks K")->check(kPositive);
  cmd->add_option("--microbatches,-m", o->microbatches, "Micro-batches M per mini-batch")->check(kPositive);
  cmd->add_flag("--list", o->list, "List the generators: what each is, its constraints, its bubble and stash in closed form");
  cmd->add_option("--virtual,-v", o->virtual_stages, "Stages per rank V (interleaved-1f1b; zb-v's, dualpipe-v's, v-half's and v-min's is 2 whether given or not)")
      ->check(kPositive)
      ->capture_default_str();
  cmd->add_option("--recompute", o->recompute, "Re-materialization policy (default none, or the file's)")
      ->check(CLI::IsMember(schedule::recompute_names()));
  cmd->add_option("--format,-f", o->format,
                  "Output: grid (dry-run table), text, csv (every action), json, pytorch-csv (what PyTorch's _load_csv reads)")
      ->check(CLI::IsMember(prepend("grid", schedule::format_names())))
      ->capture_default_str();
  cmd->add_flag("--compute-only", o->compute_only, "Print the generator's F/B/I/W only, before the passes");
  cmd->add_option("--max-active-stages", o->max_active_stages,
                  "Add FSDP's UNSHARD and RESHARD as PyTorch's runtime lowers its multi-stage schedules: at most N "
                  "stages of a rank gathered at a time (its max_active_stages: 3); no-ops in time unless simulated "
                  "or run with --zero 3 --reshard-after-forward off")
      ->check(kPositive);
  cmd->add_option("--out,-o", o->out, "Write to this file (atomically) instead of stdout");
  cmd->add_flag("--json", o->json, "Same as --format json");
  auto* model = cmd->add_option("--model", o->model, "Model spec (YAML, or a Hugging Face config.json): fills the partition (layers per stage)");
  cmd->add_option("--hardware", o->hardware, "Hardware preset or YAML, for --model")->needs(model);
  model->needs(cmd->get_option("--hardware"));
  cmd->add_option("--partition", o->partition, "Partition method, with --model")
      ->check(CLI::IsMember(models::method_names()))
      ->capture_default_str();
  cmd->add_option("--microbatch-size", o->microbatch_size, "Samples per micro-batch, with --model")
      ->check(kPositive)
      ->capture_default_str();
  // Without --list, a schedule needs its generator and shape, or a file that has them.
  cmd->parse_complete_callback([cmd, o] {
    if (o->list) return;
    if (!o->from.empty()) {
      for (const char* name : {"--ranks", "--microbatches", "--virtual"}) {
        if (cmd->count(name) > 0) throw CLI::ExcludesError("--from", std::string(name) + " (the file gives the shape)");
      }
      return;
    }
    for (const char* name : {"--schedule", "--ranks", "--microbatches"}) {
      if (cmd->count(name) == 0) throw CLI::RequiredError(std::string(name) + " (or --from FILE)");
    }
  });
  return [o] { return o->list ? list_generators(o->json) : run(*o); };
}

}  // namespace pipetwin::cli
