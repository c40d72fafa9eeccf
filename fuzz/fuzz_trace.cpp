// libFuzzer harness: the Chrome trace reader.
#include "fuzz/fuzz_common.hpp"
#include "schedule/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto trace = pipetwin::schedule::parse_chrome_trace(pipetwin::fuzz::text_of(data, size), "fuzz.json");
    (void)trace.timeline.bubble_fraction();
  } catch (const pipetwin::Error&) {
  }
  return 0;
}
