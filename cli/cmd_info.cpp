// `pipetwin info`: what this build of pipetwin runs on. SimGrid is linked
// here; LibTorch, CUDA and NCCL are the executor's, which is asked.
// `info --presets`: the hardware presets, each with its figures, its source
// and the file it is read from (a user's folder, or embedded).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "models/presets.hpp"
#include "twin/executables.hpp"
#include "twin/predict.hpp"

namespace pipetwin::cli {
namespace {

nlohmann::json presets_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& f : models::preset_files()) {
    const models::Hardware h = models::load_preset_file(f);
    out.push_back({{"name", f.name},
                   {"device", h.device.name},
                   {"peak_flops_half", h.device.peak_flops_half},
                   {"peak_flops_fp32", h.device.peak_flops_fp32},
                   {"memory_bytes", h.device.memory_bytes},
                   {"topology", models::topology_name(h.topology.kind)},
                   {"from", f.origin == models::PresetOrigin::Embedded ? "embedded" : "folder"},
                   {"path", f.path},
                   {"source", h.source}});
  }
  return out;
}

void print_presets(const nlohmann::json& presets) {
  std::string folders;
  for (const auto& f : models::preset_folders()) folders += (folders.empty() ? "" : ", ") + f;
  std::printf("presets: %s, then the embedded ones\n", folders.empty() ? "no folder (PIPETWIN_PRESETS, --presets-dir)"
                                                                        : folders.c_str());
  std::printf("%-15s %-16s %10s %10s %8s  %s\n", "name", "device", "half TF/s", "fp32 TF/s", "memory", "found");
  for (const auto& p : presets) {
    const std::string found = p["from"] == "embedded" ? "embedded" : p["path"].get<std::string>();
    std::printf("%-15s %-16s %10.6g %10.6g %5.4g GB  %s\n", p["name"].get<std::string>().c_str(),
                p["device"].get<std::string>().c_str(), p["peak_flops_half"].get<double>() / 1e12,
                p["peak_flops_fp32"].get<double>() / 1e12, p["memory_bytes"].get<double>() / 1e9,
                printable(found).c_str());
    std::printf("  source: %s\n", printable(p["source"].get<std::string>()).c_str());
  }
}

}  // namespace

Run add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  auto presets = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("info", "Versions of SimGrid, LibTorch, CUDA and NCCL this build uses");
  cmd->add_flag("--json", *json, "Machine-readable output");
  cmd->add_flag("--presets", *presets,
                "The hardware presets instead: name, device, peak FLOP/s, memory, where each is found, its source");
  return [json, presets] {
    if (*presets) {
      const nlohmann::json list = presets_json();
      if (*json) std::printf("%s\n", list.dump(1).c_str());
      else print_presets(list);
      return 0;
    }
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
