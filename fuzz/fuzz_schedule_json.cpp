// libFuzzer harness: the schedule json parser, then validation.
#include "fuzz/fuzz_common.hpp"
#include "schedule/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    pipetwin::fuzz::validate_if_small(pipetwin::schedule::parse_json(pipetwin::fuzz::text_of(data, size), "fuzz.json"));
  } catch (const pipetwin::Error&) {
  }
  return 0;
}
