// `pipetwin partition`: split a model over K ranks (optimal, uniform or by
// parameters) and compare the bottleneck with the other methods.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.hpp"
#include "schedule/program.hpp"
#include "cli/scenario_options.hpp"
#include "models/families.hpp"
#include "models/partition.hpp"
#include "schedule/error.hpp"
#include "twin/partition.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::cli {
namespace {

namespace pm = pipetwin::models;

struct Options {
  twin::PartitionSpec spec;
  bool json = false;
};

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

nlohmann::json to_json(const pm::Partition& p) {
  nlohmann::json j{{"method", std::string(pm::method_name(p.method))},
                   {"bottleneck_s", p.bottleneck_s},
                   {"ideal_s", p.ideal_s},
                   {"imbalance", p.imbalance()},
                   {"fits", p.fits}};
  for (const auto& s : p.stages) {
    j["stages"].push_back({{"layers", {s.layers.begin, s.layers.end}},
                           {"compute_s", s.compute_s},
                           {"transfer_s", s.transfer_s},
                           {"time_s", s.time_s},
                           {"memory_bytes", s.memory_bytes},
                           {"capacity_bytes", s.capacity_bytes},
                           {"params", s.params},
                           {"cut_in_bytes", s.cut_in_bytes},
                           {"cut_out_bytes", s.cut_out_bytes}});
  }
  return j;
}

std::string table(const pm::Model& m, const pm::Partition& p) {
  std::ostringstream out;
  out << "stage  layers                                   params   time/mb (ms)  of which transfer  memory / capacity (GB)  cut out (MB)\n";
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const auto& st = p.stages[s];
    std::string layers = std::to_string(st.layers.begin) + ".." + std::to_string(st.layers.end - 1) + " (" +
                         m.layers[st.layers.begin].name + " .. " + m.layers[st.layers.end - 1].name + ")";
    char line[256];
    std::snprintf(line, sizeof line, "%5zu  %-38s %7.1fM  %12.3f  %17.3f  %9.2f / %-9.2f%s  %12.2f\n", s, layers.c_str(),
                  st.params / 1e6, st.time_s * 1e3, st.transfer_s * 1e3, st.memory_bytes / 1e9, st.capacity_bytes / 1e9,
                  st.memory_bytes > st.capacity_bytes ? "!" : " ", st.cut_out_bytes / 1e6);
    out << line;
  }
  out << "bottleneck " << fmt("%.3f", p.bottleneck_s * 1e3) << " ms per micro-batch, ideal "
      << fmt("%.3f", p.ideal_s * 1e3) << " ms, imbalance " << fmt("%.1f%%", 100 * p.imbalance())
      << (p.fits ? "" : ", DOES NOT FIT in memory (! above)") << "\n";
  return out.str();
}

int run(const Options& o) {
  const auto report = twin::partition_report(o.spec);
  const pm::Model& model = report.model;
  const pm::Hardware& hw = report.hardware;
  const pm::PartitionRequest& r = report.request;
  const auto method = report.method;
  const auto& chosen = report.chosen;
  const auto& others = report.others;
  if (o.json) {
    nlohmann::json j{{"model", model.name},     {"hardware", hw.name},           {"ranks", r.ranks()},
                     {"stages", r.stages()},    {"schedule", o.spec.schedule},        {"microbatches", r.microbatches()},
                     {"microbatch_size", r.microbatch_size}, {"partition", to_json(chosen)}};
    for (const auto& p : others) j["compare"].push_back(to_json(p));
    std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s (%zu layers, %.1fM parameters, %s) on %s, %s, M=%d, micro-batch %d, recompute %s: %s partition\n",
              model.name.c_str(), model.layers.size(), model.params() / 1e6,
              std::string(pm::precision_name(model.precision)).c_str(), hw.describe_devices(r.ranks()).c_str(),
              o.spec.schedule.c_str(), r.microbatches(), r.microbatch_size, o.spec.recompute.c_str(),
              std::string(pm::method_name(method)).c_str());
  std::printf("%s", table(model, chosen).c_str());
  for (const auto& p : others) {
    const bool faster = chosen.bottleneck_s <= p.bottleneck_s;
    std::printf("vs %-10s bottleneck %.3f ms (%s): %s is %.1f%% %s at the bottleneck\n",
                std::string(pm::method_name(p.method)).c_str(), p.bottleneck_s * 1e3, p.fits ? "fits" : "does not fit",
                std::string(pm::method_name(method)).c_str(),
                100 * (faster ? p.bottleneck_s / chosen.bottleneck_s - 1 : chosen.bottleneck_s / p.bottleneck_s - 1),
                faster ? "faster" : "slower");
  }
  return 0;
}

}  // namespace

Run add_partition_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("partition", "Split a model's layers over K ranks, balancing stage time within memory");
  cmd->add_option("--model", o->spec.model, "Model spec (YAML, or a Hugging Face config.json)")->required();
  cmd->add_option("--hardware", o->spec.hardware, "Hardware preset name or YAML file")->required();
  cmd->add_option("--ranks,-k", o->spec.ranks, "Ranks K (with a generator)")->check(kPositive);
  cmd->add_option("--virtual,-v", o->spec.virtual_stages, "Stages per rank V (default 1)")->check(kPositive);
  cmd->add_option("--schedule,-s", o->spec.schedule,
                  "Schedule generator or file (decides the placement and the activations each stage stashes)")
      ->check(schedule_check())
      ->capture_default_str();
  cmd->add_option("--microbatches,-m", o->spec.microbatches, "Micro-batches M (default 1)")->check(kPositive);
  cmd->add_option("--microbatch-size", o->spec.microbatch_size, "Samples per micro-batch")->check(kPositive)->capture_default_str();
  cmd->add_option("--recompute", o->spec.recompute, "Re-materialization: none, full, except-last, selective, uniform[:N], block:N, op (default none, or the schedule file's)")
      ->check(kRecomputeChoice);
  cmd->add_option("--optimizer", o->spec.optimizer, "Optimizer (its state counts in memory)")
      ->check(CLI::IsMember(models::optimizer_names()))
      ->capture_default_str();
  cmd->add_option("--method", o->spec.method, "optimal (exact), uniform (by layers), parameters (DeepSpeed-like)")
      ->check(CLI::IsMember(models::method_names()))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable output");
  cmd->parse_complete_callback([cmd, o] {
    if (!twin::is_schedule_file(o->spec.schedule) && cmd->count("--ranks") == 0) {
      throw CLI::RequiredError("--ranks (with a schedule generator)");
    }
  });
  return [o] { return run(*o); };
}

}  // namespace pipetwin::cli
