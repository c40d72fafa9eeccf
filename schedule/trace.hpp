// Chrome Trace Event JSON, the one timeline format of pipetwin: predicted
// (sim/) and measured (exec/) timelines are written and read by this code.
//
//   {"traceEvents": [
//      {"ph":"X","name":"1F3","pid":1,"tid":0,"ts":120.5,"dur":40.0,
//       "args":{"op":"F","stage":1,"microbatch":3}},          <- µs; pid = rank
//      {"ph":"s","id":7,...}, {"ph":"f","bp":"e","id":7,...}  <- send -> receive flow
//    ],
//    "otherData": {...}}                                     <- what produced it
//
// tid 0 = compute, 1 = send, 2 = receive. Perfetto and chrome://tracing open it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "schedule/timeline.hpp"

namespace pipetwin::schedule {

// A value over time on one rank's track ("ph":"C"), e.g. a stage's memory.
struct Counter {
  std::string name;
  int rank = 0;
  double time = 0;  // seconds
  double value = 0;
};

struct Trace {
  Timeline timeline;        // seconds
  nlohmann::json metadata;  // "otherData": producer, model, schedule, shape...
  std::vector<Counter> counters;
};

std::string to_chrome_trace(const Trace& trace);
Trace parse_chrome_trace(const std::string& text, const std::string& source);
void write_chrome_trace(const std::string& path, const Trace& trace);  // atomic
Trace read_chrome_trace(const std::string& path);

}  // namespace pipetwin::schedule
