// libFuzzer harness: hardware specs (YAML), then a route through the topology.
#include "fuzz/fuzz_common.hpp"
#include "models/hardware.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto node = pipetwin::models::parse_yaml(pipetwin::fuzz::text_of(data, size), "fuzz.yaml");
    const auto hw = pipetwin::models::hardware_from_yaml(pipetwin::models::YamlFields(node, "fuzz.yaml"));
    (void)hw.topology.path(0, 5);
    (void)hw.device.compute_seconds(1e9, pipetwin::models::Precision::BF16);
  } catch (const pipetwin::Error&) {
  }
  return 0;
}
