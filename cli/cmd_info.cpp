// `pipetwin info`: what this build of pipetwin runs on.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "exec/torch_info.hpp"
#include "sim/transfer_probe.hpp"

namespace pipetwin::cli {

Run add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("info", "Versions of SimGrid, LibTorch, CUDA and NCCL this build uses");
  cmd->add_flag("--json", *json, "Machine-readable output");
  return [json] {
    const auto t = exec::torch_info();
    nlohmann::json j{{"simgrid", sim::simgrid_version()},
                     {"libtorch", t.version},
                     {"libtorch_cuda_built", t.cuda_built},
                     {"cuda_available", t.cuda_available},
                     {"cuda_devices", t.cuda_devices},
                     {"c10d_gloo", t.gloo},
                     {"c10d_nccl", t.nccl},
                     {"nccl", t.nccl_version},
                     {"intra_op_threads", t.intra_op_threads}};
    if (*json) {
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      for (const auto& [k, v] : j.items()) std::printf("%-20s %s\n", k.c_str(), v.dump().c_str());
    }
    return 0;
  };
}

}  // namespace pipetwin::cli
