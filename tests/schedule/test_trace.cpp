// Chrome traces: round trip, flow events from sends to receives, errors.
#include <gtest/gtest.h>

#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/trace.hpp"

namespace ps = pipetwin::schedule;

TEST(Trace, RoundTripsATimelineAndItsMetadata) {
  const auto run = ps::dry_run(ps::build_schedule("1f1b", {3, 4}), {0.5, 1.25, 1, 1, 1, 0.125, 0});
  ps::Trace trace{run.timeline, {{"producer", "test"}, {"ranks", 3}}, {{"stage 1 memory (GB)", 1, 0.5, 2.25}}};
  const auto back = ps::parse_chrome_trace(ps::to_chrome_trace(trace), "t.json");
  EXPECT_EQ(back.metadata["producer"], "test");
  ASSERT_EQ(back.counters.size(), 1u);
  EXPECT_EQ(back.counters[0].name, "stage 1 memory (GB)");
  EXPECT_EQ(back.counters[0].rank, 1);
  EXPECT_DOUBLE_EQ(back.counters[0].time, 0.5);
  EXPECT_DOUBLE_EQ(back.counters[0].value, 2.25);
  ASSERT_EQ(back.timeline.ranks.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(back.timeline.ranks[r].size(), run.timeline.ranks[r].size());
    for (std::size_t i = 0; i < back.timeline.ranks[r].size(); ++i) {
      EXPECT_EQ(back.timeline.ranks[r][i].action, run.timeline.ranks[r][i].action);
      EXPECT_NEAR(back.timeline.ranks[r][i].start, run.timeline.ranks[r][i].start, 1e-12);
      EXPECT_NEAR(back.timeline.ranks[r][i].end, run.timeline.ranks[r][i].end, 1e-12);
    }
  }
  EXPECT_DOUBLE_EQ(back.timeline.makespan(), run.timeline.makespan());
}

TEST(Trace, HasAFlowFromEverySendToItsReceiveAndThreadsPerKind) {
  const auto program = ps::build_schedule("gpipe", {2, 3});
  const auto text = ps::to_chrome_trace({ps::dry_run(program).timeline, {}, {}});
  const auto doc = nlohmann::json::parse(text);
  int starts = 0, finishes = 0, sends = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "s") ++starts;
    if (e["ph"] == "f") ++finishes;
    if (e["ph"] == "X" && e["tid"] == 1) ++sends;
    if (e["ph"] == "X" && e["name"] == "1F2") {
      EXPECT_EQ(e["pid"], 1);
      EXPECT_EQ(e["tid"], 0);
      EXPECT_EQ(e["args"]["stage"], 1);
      EXPECT_EQ(e["args"]["microbatch"], 2);
      EXPECT_EQ(e["args"]["op"], "F");
    }
  }
  EXPECT_EQ(sends, 6);  // 3 activations forward, 3 gradients backward
  EXPECT_EQ(starts, 6);
  EXPECT_EQ(finishes, 6);
}

TEST(Trace, BadFilesNameTheEventAndField) {
  const auto error_of = [](const std::string& text) {
    try {
      ps::parse_chrome_trace(text, "bad.json");
    } catch (const pipetwin::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"X\",").find("truncated"), std::string::npos);
  EXPECT_NE(error_of("{\"events\": []}").find("no 'traceEvents'"), std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"0F0\",\"pid\":0,\"ts\":1}]}").find("traceEvents[0]: missing field 'dur'"),
            std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"zz\",\"pid\":0,\"ts\":1,\"dur\":1}]}").find("field 'name'"),
            std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"0F0\",\"pid\":-1,\"ts\":1,\"dur\":1}]}").find("field 'pid'"),
            std::string::npos);
}

TEST(Trace, OddValuesAreErrorsNotOtherExceptions) {
  // What fuzz_trace reaches: numbers past a double, fields of the wrong JSON
  // type (nlohmann::json throws its own exceptions for them), and a pid that
  // would size the timeline to a billion ranks.
  const auto error_of = [](const std::string& text) {
    try {
      ps::parse_chrome_trace(text, "odd.json");
    } catch (const pipetwin::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ts\": 1e999}]}").find("odd.json: not a Chrome trace"), std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"0F0\",\"pid\":999999999,\"ts\":1,\"dur\":1}]}")
                .find("traceEvents[0]: field 'pid' must be a rank (integer, 0 to 999999)"),
            std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"C\",\"name\":\"m\",\"pid\":0,\"ts\":1,\"args\":{\"value\":\"a\"}}]}")
                .find("traceEvents[0]: field 'args.value' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of("{\"traceEvents\": [{\"ph\":\"C\",\"pid\":0,\"ts\":\"t\",\"args\":{\"value\":1}}]}")
                .find("traceEvents[0]: field 'ts' must be a number"),
            std::string::npos);
  // Events of another kind, or with a "ph" that is not a string, are skipped as before.
  const auto t = ps::parse_chrome_trace("{\"traceEvents\": [{\"ph\": 5}, {\"ph\":\"X\",\"name\":\"0F0\",\"pid\":1,"
                                        "\"ts\":0,\"dur\":2}], \"otherData\": 3}",
                                        "ok.json");
  EXPECT_EQ(t.timeline.ranks.size(), 2u);
  EXPECT_TRUE(t.metadata.is_object());
}
