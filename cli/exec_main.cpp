// pipetwin-exec: the executor, the one executable that links LibTorch.
// `pipetwin run` hands its arguments over to it; `info --json` reports the
// LibTorch, CUDA and NCCL it runs on, for `pipetwin info`.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "exec/torch_info.hpp"

namespace pipetwin::cli {
namespace {

Run add_torch_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("info", "Versions of LibTorch, CUDA and NCCL the executor runs on");
  cmd->add_flag("--json", *json, "Machine-readable output");
  return [json] {
    const auto t = exec::torch_info();
    const nlohmann::json j{{"libtorch", t.version},         {"libtorch_cuda_built", t.cuda_built},
                           {"cuda_available", t.cuda_available}, {"cuda_devices", t.cuda_devices},
                           {"c10d_gloo", t.gloo},             {"c10d_nccl", t.nccl},
                           {"nccl", t.nccl_version},          {"intra_op_threads", t.intra_op_threads}};
    if (*json) {
      std::printf("%s\n", j.dump(1).c_str());
    } else {
      for (const auto& [k, v] : j.items()) std::printf("%-20s %s\n", k.c_str(), v.dump().c_str());
    }
    return 0;
  };
}

}  // namespace
}  // namespace pipetwin::cli

int main(int argc, char** argv) {
  namespace pc = pipetwin::cli;
  return pc::run_app(argc, argv, "pipetwin-exec: runs pipeline-parallel training for real (pipetwin run)",
                     {pc::add_run_command, pc::add_torch_info_command});
}
