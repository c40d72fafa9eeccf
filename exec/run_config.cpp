// The run's enums, parsed once from the command line's words.
#include "exec/run.hpp"
#include "schedule/error.hpp"
#include "schedule/names.hpp"

namespace pipetwin::exec {

namespace {
constexpr schedule::NameTable<Device, 2> kDevices{"device", {{{Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}}}};
}  // namespace

Device parse_device(std::string_view name) {
  if (!kDevices.contains(name)) throw Error("--device must be " + kDevices.joined(" or ") + ", got '" + std::string(name) + "'");
  return kDevices.parse(name);
}
const std::vector<std::string>& device_names() {
  static const auto names = kDevices.names();
  return names;
}

std::string_view device_name(Device device) { return kDevices.name(device); }

std::string_view backend_name(Device device) { return device == Device::Cuda ? "NCCL" : "Gloo"; }

}  // namespace pipetwin::exec
