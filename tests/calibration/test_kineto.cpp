// torch.profiler traces (calibration/kineto.hpp): a run of two ranks written
// as PyTorch's runtime labels its actions, with known times, read back: the
// order, each action's attributed cost, the flights, the fitted table and
// its replay, in closed form. (Real traces of PyTorch's schedules:
// tests/python/test_torch_profiler.py.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <zlib.h>

#include "calibration/kineto.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "twin/calibrate_kineto.hpp"

namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using pipetwin::calibration::read_kineto_run;

struct R {
  std::string name;
  double ts, end;  // µs
};

// One rank's trace as export_chrome_trace writes it (the parts read).
void write_rank(const fs::path& dir, int rank, int world, const std::vector<R>& ranges, const std::string& host = "h") {
  json events = json::array();
  for (const auto& r : ranges) {
    events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", r.name}, {"pid", 100 + rank}, {"tid", 100 + rank},
                      {"ts", 5e12 + r.ts}, {"dur", r.end - r.ts}});
    events.push_back({{"ph", "X"}, {"cat", "cpu_op"}, {"name", "aten::mm"}, {"pid", 100 + rank}, {"tid", 100 + rank},
                      {"ts", 5e12 + r.ts}, {"dur", 0.5}});
  }
  const json doc = {{"schemaVersion", 1},
                    {"deviceProperties", json::array()},
                    {"distributedInfo", {{"backend", "gloo"}, {"rank", rank}, {"world_size", world}}},
                    {"host_name", host},
                    {"traceEvents", events}};
  fs::create_directories(dir);
  std::ofstream(dir / ("rank" + std::to_string(rank) + ".json")) << doc.dump();
}

// GPipe's order on two stages, M = 2: stage 0's F takes 100 µs, its B 200;
// stage 1's 200 and 400; sends take 10 µs to post, receives 5; activations
// fly 20 µs, gradients 30. Rank 1's F1 begins after its message arrived.
fs::path two_rank_run(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  write_rank(dir, 0, 2,
             {{"PP:0F0", 0, 100}, {"PP:0SEND_F0", 100, 110}, {"PP:0F1", 110, 210}, {"PP:0SEND_F1", 210, 220},
              {"PP:0RECV_B0", 220, 225}, {"gloo:recv", 222, 980}, {"PP:0B0", 225, 1180},
              {"PP:0RECV_B1", 1180, 1185}, {"gloo:recv", 1182, 1390}, {"PP:0B1", 1185, 1590}});
  write_rank(dir, 1, 2,
             {{"PP:1RECV_F0", 0, 5}, {"gloo:recv", 2, 130}, {"PP:1F0", 5, 330}, {"PP:1RECV_F1", 330, 335},
              {"gloo:recv", 332, 340}, {"PP:1F1", 335, 540}, {"PP:1B0", 540, 940}, {"PP:1SEND_B0", 940, 950},
              {"PP:1B1", 950, 1350}, {"PP:1SEND_B1", 1350, 1360}});
  return dir;
}

TEST(Kineto, ReadsTheOrderTheRanksRanAndEachActionsCost) {
  const auto run = read_kineto_run(two_rank_run("order").string());
  EXPECT_EQ(pipetwin::schedule::to_text(run.program).find("rank 0: 0F0 0F1 0B0 0B1") != std::string::npos, true)
      << pipetwin::schedule::to_text(run.program);
  ASSERT_EQ(run.num_steps(), 1);
  EXPECT_NEAR(run.step_times_s[0], 1590e-6, 1e-9);
  std::map<std::string, double> cost;
  for (const auto& rank : run.steps[0]) {
    for (const auto& a : rank) cost[pipetwin::schedule::to_string(a.action)] = a.cost;
  }
  EXPECT_NEAR(cost["0F1"], 100e-6, 1e-9);    // from the end of 0SEND_F0
  EXPECT_NEAR(cost["1F0"], 200e-6, 1e-9);    // from its input's arrival, not the range's start
  EXPECT_NEAR(cost["1F1"], 200e-6, 1e-9);    // from when the wait returned (340), after the rank was free (335)
  EXPECT_NEAR(cost["0B0"], 200e-6, 1e-9);
  EXPECT_NEAR(cost["1B1"], 400e-6, 1e-9);
  EXPECT_NEAR(cost["1RECV_F1"], 5e-6, 1e-9);
  // The compute actions of the timeline start when their input was there.
  const auto t = run.timeline(0);
  EXPECT_NEAR(t.ranks[1][1].start, 130e-6, 1e-9);
}

TEST(Kineto, FitsTheStagesAndTheFlightsAndReplaysTheRun) {
  const auto c = pipetwin::twin::calibrate_kineto({two_rank_run("fit").string()}, {});
  const auto& s = c.fit.table.stages;
  ASSERT_EQ(s.size(), 2u);
  EXPECT_NEAR(s[0].forward_s, 100e-6, 1e-9);
  EXPECT_NEAR(s[0].backward_s, 200e-6, 1e-9);
  EXPECT_NEAR(s[1].forward_s, 200e-6, 1e-9);
  EXPECT_NEAR(s[1].backward_s, 400e-6, 1e-9);
  EXPECT_NEAR(s[0].send_s, 10e-6, 1e-9);
  EXPECT_NEAR(s[1].recv_s, 5e-6, 1e-9);
  // Three flights seen whole (20, 30, 30 µs); 1F1 began after its message had left.
  ASSERT_TRUE(s[0].output_transfer_s.has_value());
  EXPECT_NEAR(*s[0].output_transfer_s, 80e-6 / 3, 1e-9);
  EXPECT_EQ(c.fit.samples[0].flights, 3);
  // The replay: the critical path of the fitted costs, 1588.3 µs, against 1590 measured.
  ASSERT_EQ(c.runs.size(), 1u);
  EXPECT_NEAR(c.runs[0].predicted_s, 1590e-6 - 5e-6 / 3, 1e-8);
  // The table reads back to the same numbers.
  const auto back = pipetwin::models::parse_cost_table(c.yaml, "fitted");
  EXPECT_EQ(back.stages[1].forward_s, s[1].forward_s);
  EXPECT_EQ(*back.stages[0].output_transfer_s, *s[0].output_transfer_s);
}

TEST(Kineto, TwoSizesOfMicroBatchGiveTimesPerSample) {
  // The run above at M = 2 (8 samples per micro-batch of a batch of 16), and
  // one at M = 4 whose every time is half: stage 1's forward is 200 µs at 8
  // samples and 100 at 4, so 25 µs per sample and nothing fixed.
  const fs::path a = two_rank_run("size8");
  const fs::path b = fs::path(::testing::TempDir()) / "size4";
  fs::remove_all(b);
  const auto half = [](std::vector<R> v) {
    for (auto& r : v) r.ts /= 2, r.end /= 2;
    return v;
  };
  // M = 4: the two micro-batches twice over, each half as long (the labels renumbered).
  write_rank(b, 0, 2,
             half({{"PP:0F0", 0, 100}, {"PP:0SEND_F0", 100, 110}, {"PP:0F1", 110, 210}, {"PP:0SEND_F1", 210, 220},
                   {"PP:0F2", 220, 320}, {"PP:0SEND_F2", 320, 330}, {"PP:0F3", 330, 430}, {"PP:0SEND_F3", 430, 440},
                   {"PP:0B0", 2000, 2200}, {"PP:0B1", 2200, 2400}, {"PP:0B2", 2400, 2600}, {"PP:0B3", 2600, 2800}}));
  write_rank(b, 1, 2,
             half({{"PP:1F0", 200, 400}, {"PP:1F1", 400, 600}, {"PP:1F2", 600, 800}, {"PP:1F3", 800, 1000},
                   {"PP:1B0", 1000, 1400}, {"PP:1SEND_B0", 1400, 1410}, {"PP:1B1", 1410, 1810},
                   {"PP:1SEND_B1", 1810, 1820}, {"PP:1B2", 1820, 2220}, {"PP:1SEND_B2", 2220, 2230}, {"PP:1B3", 2230, 2630},
                   {"PP:1SEND_B3", 2630, 2640}}));
  EXPECT_THROW(pipetwin::twin::calibrate_kineto({a.string(), b.string()}, {}), pipetwin::Error);  // M differs, no batch
  const auto c = pipetwin::twin::calibrate_kineto({a.string(), b.string()}, {}, 16);
  const auto& r = c.fit.table.stages[1];
  ASSERT_TRUE(r.per_sample_s.count("forward_s"));
  EXPECT_NEAR(r.per_sample_s.at("forward_s"), 200e-6 / 8, 1e-9);  // 200 µs at 8 samples, 100 at 4
  EXPECT_NEAR(c.fit.table.samples_per_microbatch, 8, 0);
  EXPECT_NEAR(c.fit.table.at_samples(2).stages[1].forward_s, 50e-6, 1e-9);
}

TEST(Kineto, ReadsGzippedTraces) {
  // tensorboard_trace_handler(use_gzip=True) writes *.pt.trace.json.gz.
  const fs::path plain = two_rank_run("plain");
  const fs::path gz = fs::path(::testing::TempDir()) / "gzipped";
  fs::remove_all(gz);
  fs::create_directories(gz);
  for (const int r : {0, 1}) {
    std::ifstream in(plain / ("rank" + std::to_string(r) + ".json"));
    std::stringstream text;
    text << in.rdbuf();
    const std::string out = (gz / ("host_" + std::to_string(r) + ".1.pt.trace.json.gz")).string();
    gzFile f = gzopen(out.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, text.str().data(), static_cast<unsigned>(text.str().size())), static_cast<int>(text.str().size()));
    gzclose(f);
  }
  EXPECT_TRUE(pipetwin::calibration::is_kineto_file((gz / "host_0.1.pt.trace.json.gz").string()));
  const auto a = read_kineto_run(plain.string()), b = read_kineto_run(gz.string());
  EXPECT_EQ(pipetwin::schedule::to_text(a.program), pipetwin::schedule::to_text(b.program));
  EXPECT_EQ(a.step_times_s, b.step_times_s);
  // A damaged one is refused by name.
  std::ofstream(gz / "host_1.1.pt.trace.json.gz", std::ios::trunc) << "\x1f\x8b\x08\x00garbage";
  EXPECT_THROW(read_kineto_run(gz.string()), pipetwin::Error);
}

// FSDP's UNSHARD and RESHARD are the runtime's own: with more of a rank's
// stages taking turns than stay gathered (PyTorch's max_active_stages), a
// stage is gathered more than once a step, every step alike. Two steps of
// the run above, rank 0 gathering stage 0 twice in each: read as two steps.
TEST(Kineto, AStageGatheredTwiceAStepIsOneStep) {
  const fs::path dir = fs::path(::testing::TempDir()) / "unshards";
  fs::remove_all(dir);
  std::vector<R> zero, one;
  for (const double at : {0.0, 2000.0}) {
    for (const R& r : std::vector<R>{{"PP:0UNSHARD", 0, 1}, {"PP:0F0", 1, 100}, {"PP:0SEND_F0", 100, 110},
                                     {"PP:0F1", 110, 210}, {"PP:0SEND_F1", 210, 220}, {"PP:0RESHARD", 220, 221},
                                     {"PP:0UNSHARD", 221, 222}, {"PP:0RECV_B0", 222, 225}, {"gloo:recv", 223, 980},
                                     {"PP:0B0", 225, 1180}, {"PP:0RECV_B1", 1180, 1185}, {"gloo:recv", 1182, 1390},
                                     {"PP:0B1", 1185, 1590}, {"PP:0RESHARD", 1590, 1591}}) {
      zero.push_back({r.name, r.ts + at, r.end + at});
    }
    for (const R& r : std::vector<R>{{"PP:1RECV_F0", 0, 5}, {"gloo:recv", 2, 130}, {"PP:1F0", 5, 330},
                                     {"PP:1RECV_F1", 330, 335}, {"gloo:recv", 332, 340}, {"PP:1F1", 335, 540},
                                     {"PP:1B0", 540, 940}, {"PP:1SEND_B0", 940, 950}, {"PP:1B1", 950, 1350},
                                     {"PP:1SEND_B1", 1350, 1360}}) {
      one.push_back({r.name, r.ts + at, r.end + at});
    }
  }
  write_rank(dir, 0, 2, zero);
  write_rank(dir, 1, 2, one);
  const auto run = read_kineto_run(dir.string());
  ASSERT_EQ(run.num_steps(), 2);
  EXPECT_NE(pipetwin::schedule::to_text(run.program).find("rank 0: 0F0 0F1 0B0 0B1"), std::string::npos)
      << pipetwin::schedule::to_text(run.program);
  for (int step = 0; step < 2; ++step) EXPECT_NEAR(run.step_times_s[step], 1591e-6, 1e-9) << step;
  // Three of them in a step, or a pipeline action repeated: part of a step.
  zero.push_back({"PP:0UNSHARD", 4000, 4001});
  write_rank(dir, 0, 2, zero);
  try {
    read_kineto_run(dir.string());
    ADD_FAILURE() << "5 UNSHARDs in 2 steps were read";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("0UNSHARD occurs 5 times but"), std::string::npos) << e.what();
  }
}

TEST(Kineto, RefusesWhatItCannotRead) {
  const fs::path dir = fs::path(::testing::TempDir()) / "refused";
  const auto refused = [&](const std::string& want) {
    try {
      read_kineto_run(dir.string());
      ADD_FAILURE() << "no error; wanted: " << want;
    } catch (const pipetwin::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fs::remove_all(dir);
  write_rank(dir, 0, 2, {{"PP:0F0", 0, 1}, {"PP:0B0", 1, 2}});
  refused("no trace of rank 1 of the 2");
  write_rank(dir, 1, 2, {{"PP:1F0", 0, 1}, {"PP:1B0", 1, 2}, {"PP:1F0", 3, 4}});
  refused("rank 1: 1F0 occurs 2 times but 1B0 1");
  write_rank(dir, 1, 2, {{"PP:1F0", 0, 1}, {"PP:1B0", 1, 2}}, "other-host");
  refused("the hosts' clocks are not comparable");
  write_rank(dir, 1, 2, {{"PP:(1F0;1B0)OVERLAP_F_B", 0, 1}});
  refused("overlaps a forward and a backward");
  write_rank(dir, 1, 2, {{"aten::mm", 0, 1}});
  refused("no labelled pipeline actions");
}

}  // namespace
