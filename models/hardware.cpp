// Hardware: the devices of the ranks, and a preset name or a file loaded.
#include "models/hardware.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "schedule/error.hpp"

namespace pipetwin::models {

std::vector<Device> Hardware::rank_devices(int ranks) const {
  if (devices.empty()) return std::vector<Device>(ranks, device);
  if (ranks > static_cast<int>(devices.size())) {
    throw Error("hardware " + name + " lists " + std::to_string(devices.size()) + " devices (devices:), not enough for " +
                std::to_string(ranks) + " ranks");
  }
  return {devices.begin(), devices.begin() + ranks};
}

std::string Hardware::describe_devices(int ranks) const {
  const auto list = devices.empty() ? std::vector<Device>(1, device) : rank_devices(ranks);
  const auto same = [](const Device& a, const Device& b) { return a == b; };
  if (std::all_of(list.begin(), list.end(), [&](const Device& d) { return same(d, list.front()); })) {
    return std::to_string(ranks) + " x " + list.front().name;
  }
  std::string out;
  for (const auto& d : list) {
    char memory[32];
    std::snprintf(memory, sizeof memory, " (%g GB)", d.memory_bytes / 1e9);
    out += (out.empty() ? "" : ", ") + d.name + memory;
  }
  return out;
}

Hardware load_hardware(const std::string& name_or_path) {
  const auto names = preset_names();
  if (std::find(names.begin(), names.end(), name_or_path) != names.end()) return preset(name_or_path);
  if (!std::filesystem::exists(name_or_path)) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error("hardware '" + name_or_path + "' is neither a preset (" + list + ") nor a file");
  }
  return hardware_from_yaml(YamlFields(load_yaml_file(name_or_path), name_or_path));
}

}  // namespace pipetwin::models
