// libFuzzer harness: the Chrome trace reader, and what calibrate and compare
// check in a trace once it is read (its otherData against the Program it
// describes, every rank's actions, the step; compare's matching of two traces).
#include "calibration/compare.hpp"
#include "calibration/traces.hpp"
#include "fuzz/fuzz_common.hpp"
#include "schedule/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto trace = pipetwin::schedule::parse_chrome_trace(pipetwin::fuzz::text_of(data, size), "fuzz.json");
    (void)trace.timeline.bubble_fraction();
    try {
      const auto run = pipetwin::calibration::trace_run_from(trace, "fuzz.json");
      (void)run.describe();
    } catch (const pipetwin::Error&) {
    }
    // A trace against itself: zero error wherever it is accepted.
    (void)pipetwin::calibration::compare(trace, "fuzz.json", trace, "fuzz.json").to_text();
  } catch (const pipetwin::Error&) {
  }
  return 0;
}
