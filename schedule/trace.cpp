// Chrome trace writer and reader.
#include "schedule/trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "schedule/error.hpp"
#include "schedule/interpreter.hpp"
#include "schedule/io.hpp"

namespace pipetwin::schedule {
namespace {

using nlohmann::json;
constexpr double kMicro = 1e6;
constexpr double kMaxMicroseconds = 1e12;

int tid_of(Op op) { return is_send(op) ? 1 : is_recv(op) ? 2 : 0; }

}  // namespace

std::string to_chrome_trace(const Trace& trace) {
  json events = json::array();
  const auto& ranks = trace.timeline.ranks;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
    for (const auto& [tid, name] : {std::pair{0, "compute"}, std::pair{1, "send"}, std::pair{2, "recv"}}) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", r}, {"tid", tid}, {"args", {{"name", name}}}});
    }
  }
  std::map<MessageKey, std::pair<std::size_t, double>> sends;  // key -> rank, time
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& t : ranks[r]) {
      json args{{"op", std::string(op_name(t.action.op))}, {"stage", t.action.stage.value}};
      if (t.action.microbatch) args["microbatch"] = t.action.microbatch->value;
      if (t.action.overlapped) args["overlapped"] = true;  // with the compute action before it: an OVERLAP_F_B
      events.push_back({{"ph", "X"},
                        {"name", to_string(t.action)},
                        {"cat", is_compute(t.action.op) ? "compute" : is_transfer(t.action.op) ? "transfer" : "other"},
                        {"pid", r},
                        {"tid", tid_of(t.action.op)},
                        {"ts", t.start * kMicro},
                        {"dur", (t.end - t.start) * kMicro},
                        {"args", args}});
      if (is_send(t.action.op)) sends[message_of(t.action)] = {r, t.start};
    }
  }
  int flow = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (const auto& t : ranks[r]) {
      if (!is_recv(t.action.op)) continue;
      const auto it = sends.find(message_of(t.action));
      if (it == sends.end()) continue;
      const std::string name = to_string(matching_send(t.action)) + " -> " + to_string(t.action);
      events.push_back({{"ph", "s"}, {"id", flow}, {"name", name}, {"cat", "transfer"}, {"pid", it->second.first},
                        {"tid", 1}, {"ts", it->second.second * kMicro}});
      events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", flow}, {"name", name}, {"cat", "transfer"}, {"pid", r},
                        {"tid", 2}, {"ts", t.end * kMicro}});
      ++flow;
    }
  }
  for (const auto& c : trace.counters) {
    events.push_back({{"ph", "C"}, {"name", c.name}, {"pid", c.rank}, {"ts", c.time * kMicro}, {"args", {{"value", c.value}}}});
  }
  json doc{{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", trace.metadata.is_null() ? json::object() : trace.metadata}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Trace parse_chrome_trace(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past a double
    throw Error(source + ": not a Chrome trace (invalid or truncated JSON: " + e.what() + ")");
  }
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    throw Error(source + ": not a Chrome trace (no 'traceEvents' list)");
  }
  Trace trace;
  if (doc.contains("otherData")) trace.metadata = doc["otherData"];
  if (!trace.metadata.is_object()) trace.metadata = json::object();
  const auto& events = doc["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.is_object() || !e.contains("ph")) continue;
    const std::string where = source + ": traceEvents[" + std::to_string(i) + "]";
    // pid is a rank; ranks index the timeline, so they are bounded like stages.
    const auto check_rank = [&](const json& v) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= kMaxStages) {
        throw Error(where + ": field 'pid' must be a rank (integer, 0 to " + std::to_string(kMaxStages - 1) + ")");
      }
      return v.get<int>();
    };
    const auto number_or = [&](const char* field, double fallback) {
      if (!e.contains(field)) return fallback;
      if (!e[field].is_number()) throw Error(where + ": field '" + std::string(field) + "' must be a number");
      return e[field].get<double>();
    };
    if (e["ph"] == "C" && e.contains("args") && e["args"].is_object() && e["args"].contains("value")) {
      if (!e["args"]["value"].is_number()) throw Error(where + ": field 'args.value' must be a number");
      trace.counters.push_back({e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "",
                                e.contains("pid") ? check_rank(e["pid"]) : 0, number_or("ts", 0.0) / kMicro,
                                e["args"]["value"].get<double>()});
      continue;
    }
    if (e["ph"] != "X") continue;
    for (const char* field : {"name", "pid", "ts", "dur"}) {
      if (!e.contains(field)) throw Error(where + ": missing field '" + std::string(field) + "'");
    }
    check_rank(e["pid"]);
    if (!e["ts"].is_number() || !e["dur"].is_number() || e["dur"].get<double>() < 0) {
      throw Error(where + ": fields 'ts' and 'dur' must be numbers, 'dur' not negative");
    }
    // Microseconds: 1e12 is 11.6 days, past any step; larger ones overflow
    // the sums made of them (a bubble of -300%, a residual of inf).
    if (std::abs(e["ts"].get<double>()) > kMaxMicroseconds || e["dur"].get<double>() > kMaxMicroseconds) {
      throw Error(where + ": fields 'ts' and 'dur' must be at most 1e12 us (11.6 days) in size, got ts " +
                  e["ts"].dump() + ", dur " + e["dur"].dump());
    }
    if (!e["name"].is_string()) throw Error(where + ": field 'name' must be an action such as 1F3");
    Action action;
    try {
      action = parse_action(e["name"].get<std::string>());
    } catch (const Error& err) {
      throw Error(where + ": field 'name': " + err.what());
    }
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("overlapped")) {
      if (!e["args"]["overlapped"].is_boolean()) throw Error(where + ": field 'args.overlapped' must be true or false");
      action.overlapped = e["args"]["overlapped"].get<bool>() && is_compute(action.op) && action.op != Op::R;
    }
    const auto rank = static_cast<std::size_t>(e["pid"].get<int>());
    if (trace.timeline.ranks.size() <= rank) trace.timeline.ranks.resize(rank + 1);
    const double start = e["ts"].get<double>() / kMicro;
    trace.timeline.ranks[rank].push_back({action, start, start + e["dur"].get<double>() / kMicro});
  }
  for (auto& rank : trace.timeline.ranks) {
    std::stable_sort(rank.begin(), rank.end(), [](const auto& a, const auto& b) { return a.start < b.start; });
  }
  return trace;
}

void write_chrome_trace(const std::string& path, const Trace& trace) { write_file_atomic(path, to_chrome_trace(trace)); }

Trace read_chrome_trace(const std::string& path) { return parse_chrome_trace(read_file(path), path); }

}  // namespace pipetwin::schedule
