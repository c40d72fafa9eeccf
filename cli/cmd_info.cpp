// `pipetwin info`: what this build of pipetwin runs on. SimGrid is linked
// here; LibTorch, CUDA and NCCL are the executor's, which is asked.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "twin/executables.hpp"
#include "twin/predict.hpp"

namespace pipetwin::cli {

Run add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("info", "Versions of SimGrid, LibTorch, CUDA and NCCL this build uses");
  cmd->add_flag("--json", *json, "Machine-readable output");
  return [json] {
    nlohmann::json j{{"simgrid", twin::simgrid_version()}};
    j["plots"] = twin::plots_dir();
    j.update(twin::executor_info());
    if (*json) {
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      for (const auto& [k, v] : j.items()) std::printf("%-20s %s\n", k.c_str(), v.dump().c_str());
    }
    return 0;
  };
}

}  // namespace pipetwin::cli
