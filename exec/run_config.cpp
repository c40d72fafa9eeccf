// The run's enums, parsed once from the command line's words.
#include "exec/run.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  throw Error("--device must be cpu or cuda, got '" + std::string(name) + "'");
}

std::string_view device_name(Device device) { return device == Device::Cuda ? "cuda" : "cpu"; }

std::string_view backend_name(Device device) { return device == Device::Cuda ? "NCCL" : "Gloo"; }

}  // namespace pipetwin::exec
