// libFuzzer harness: model specs (YAML), then their costs and cut sizes.
#include "fuzz/fuzz_common.hpp"
#include "models/families.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto node = pipetwin::models::parse_yaml(pipetwin::fuzz::text_of(data, size), "fuzz.yaml");
    // Specs that would expand into millions of layers are valid but too slow to fuzz.
    if (node.IsMap() && node["layers"] && node["layers"].IsScalar() && node["layers"].Scalar().size() > 4) return 0;
    const auto model = pipetwin::models::model_from_yaml(pipetwin::models::YamlFields(node, "fuzz.yaml"));
    (void)model.params();
    (void)model.cut_elems();
  } catch (const pipetwin::Error&) {
  }
  return 0;
}
