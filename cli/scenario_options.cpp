// add_scenario_options: the options of one configuration, onto a ScenarioSpec.
#include "cli/scenario_options.hpp"

#include "cli/commands.hpp"
#include "schedule/generators.hpp"

namespace pipetwin::cli {

void add_scenario_options(CLI::App* cmd, twin::ScenarioSpec& o) {
  std::vector<std::string> names;
  for (const auto& g : schedule::generators()) names.emplace_back(g.name);
  cmd->add_option("--model", o.model, "Model spec (YAML)")->required();
  cmd->add_option("--hardware", o.hardware, "Hardware preset name or YAML file")->required();
  cmd->add_option("--schedule,-s", o.schedule, "Schedule")->required()->check(CLI::IsMember(names));
  cmd->add_option("--ranks,-k", o.ranks, "Ranks K")->required()->check(kPositive);
  cmd->add_option("--microbatches,-m", o.microbatches, "Micro-batches M")->required()->check(kPositive);
  cmd->add_option("--virtual,-v", o.virtual_stages, "Stages per rank V")->check(kPositive)->capture_default_str();
  cmd->add_option("--batch", o.batch, "Samples per mini-batch (a multiple of M; default M)")->check(kPositive);
  cmd->add_option("--recompute", o.recompute, "Re-materialization policy")
      ->check(CLI::IsMember({"none", "full", "except-last"}))
      ->capture_default_str();
  cmd->add_option("--partition", o.partition,
                  "auto (optimal), uniform, parameters, or a file: a schedule with a partition line, or begin:end ranges")
      ->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "Optimizer (its state counts in memory)")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}))
      ->capture_default_str();
}

}  // namespace pipetwin::cli
