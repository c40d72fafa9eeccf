// `pipetwin plan` and `pipetwin merge` as a user runs them, and the sweep's
// T and D columns, and simulate's --collective.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "schedule/io.hpp"
#include "tests/support/shell.hpp"

namespace {

using pipetwin::test::has;
using pipetwin::test::Result;
using pipetwin::test::run_shell;
using nlohmann::json;

const std::string kTiny = std::string(PIPETWIN_TEST_DATA_DIR) + "/tiny-llm.yaml";
const std::string kPlan = "plan --model " + kTiny + " --hardware dgx-a100-80gb --gpus 16 --global-batch 64 ";

Result run(const std::string& args) { return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1"); }
Result run_stdout(const std::string& args) { return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>/dev/null"); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// `args` (a simulate --json) as given and with `extra`: both outputs parsed,
// null where one failed.
std::pair<json, json> without_and_with(const std::string& args, const std::string& extra) {
  const auto a = run_stdout(args), b = run_stdout(args + " " + extra);
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_EQ(b.code, 0) << b.out;
  return {a.code == 0 ? json::parse(a.out) : json(), b.code == 0 ? json::parse(b.out) : json()};
}

std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> cells;
  std::istringstream in(line);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  return cells;
}

class Plan : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = pipetwin::test::scratch_dir("plan", ::testing::UnitTest::GetInstance()->current_test_info()->name()); }
  void TearDown() override { pipetwin::test::remove_tree(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(Plan, RanksTheCandidatesThatFitByThroughput) {
  const auto r = run_stdout(kPlan + "--top-sim 2 --top 1000 --json -o " + path("p.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  const auto& top = j["top"];
  ASSERT_GT(top.size(), 10u) << r.out;
  EXPECT_EQ(top.size(), j["candidates"]["fit"].get<std::size_t>());
  EXPECT_EQ(j["engines"]["simgrid"].get<int>() + j["engines"]["fast"].get<int>() + j["engines"]["fast_bound"].get<int>(),
            j["candidates"]["fit"].get<int>());
  // The best --top-sim 2 are exact: SimGrid where they have contention.
  for (std::size_t i = 0; i < 2; ++i) EXPECT_NE(top[i]["engine"], "fast-bound") << top[i];
  for (std::size_t i = 0; i < top.size(); ++i) {
    const auto& c = top[i];
    EXPECT_GE(c["why"]["memory_headroom_gb"].get<double>(), 0) << c;
    EXPECT_EQ(c["tensor"].get<int>() * c["pipeline"].get<int>() * c["data"].get<int>(), 16) << c;
    EXPECT_EQ(c["microbatches"].get<int>() * c["microbatch_size"].get<int>() * c["data"].get<int>(), 64) << c;
    EXPECT_NEAR(c["tokens_per_s"].get<double>(), 512 * c["throughput_samples_per_s"].get<double>(), 1e-6 * c["tokens_per_s"].get<double>());
    if (i > 0) {
      EXPECT_GE(top[i - 1]["throughput_samples_per_s"].get<double>(), c["throughput_samples_per_s"].get<double>());
    }
  }
  // Every candidate in the CSV, the ranked ones among them with their figures.
  const auto csv = lines_of(pipetwin::schedule::read_file(path("p.csv")));
  ASSERT_GE(csv.size(), 3u);
  EXPECT_EQ(csv.size() - 3, j["candidates"]["evaluated"].get<std::size_t>());
  EXPECT_EQ(j["candidates"]["evaluated"], j["candidates"]["enumerated"]);
  // The text form: a header, the best five, each with why.
  const auto text = run(kPlan + "--top-sim 2");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(has(text.out, "TFLOP/s/GPU")) << text.out;
  int why = 0;
  for (const auto& line : lines_of(text.out)) why += has(line, "    why: bubble ");
  EXPECT_EQ(why, 5) << text.out;
}

TEST_F(Plan, LeavesOutAndCountsTheCandidatesThatDoNotFit) {
  // GPT 1.7B on one A100: micro-batches of 16 and 32 sequences overflow its 80 GB.
  const std::string gpt = std::string(PIPETWIN_EXAMPLES_DIR) + "/gpt-1.7b.yaml";
  const auto r = run_stdout("plan --model " + gpt + " --hardware dgx-a100-80gb --gpus 1 --global-batch 32 --microbatch-sizes 4,16,32 --json -o " +
                            path("p.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["candidates"]["out_of_memory"].get<int>(), 4) << r.out;
  EXPECT_EQ(j["candidates"]["fit"].get<int>(), 2) << r.out;
  ASSERT_EQ(j["top"].size(), 2u) << r.out;
  for (const auto& c : j["top"]) {
    EXPECT_GE(c["why"]["memory_headroom_gb"].get<double>(), 0) << c;
    EXPECT_EQ(c["microbatch_size"], 4) << c;
  }
  int oom = 0;
  for (const auto& line : lines_of(pipetwin::schedule::read_file(path("p.csv")))) oom += has(line, ",oom,");
  EXPECT_EQ(oom, j["candidates"]["out_of_memory"].get<int>());
  // Llama 3 70B on one GPU: nothing fits; said, and counted.
  const auto none = run("plan --model " + std::string(PIPETWIN_SOURCE_DIR) +
                        "/tests/models/data/llama-3-70b.json --hardware dgx-a100-80gb --gpus 1 --global-batch 4");
  ASSERT_EQ(none.code, 0) << none.out;
  EXPECT_TRUE(has(none.out, "0 fit, 6 out of memory")) << none.out;
  EXPECT_TRUE(has(none.out, "no candidate fits in memory")) << none.out;
}

TEST_F(Plan, ShardsMergedAreThePlan) {
  const std::string args = kPlan + "--max-pp 4 --top-sim 1000 --json --top 1000";
  const auto whole = run_stdout(args + " -o " + path("whole.csv"));
  ASSERT_EQ(whole.code, 0) << whole.out;
  std::string parts;
  for (int i = 0; i < 3; ++i) {
    const auto part = path("part-" + std::to_string(i) + ".csv");
    const auto r = run_stdout(args + " --shard " + std::to_string(i) + "/3 -o " + part);
    ASSERT_EQ(r.code, 0) << r.out;
    parts += " " + part;
  }
  const auto merged = run_stdout("merge --json --top 1000 " + path("merged.csv") + parts);
  ASSERT_EQ(merged.code, 0) << merged.out;
  EXPECT_EQ(pipetwin::schedule::read_file(path("merged.csv")), pipetwin::schedule::read_file(path("whole.csv")));
  auto a = json::parse(whole.out), b = json::parse(merged.out);
  EXPECT_EQ(a["top"], b["top"]);
  EXPECT_EQ(a["candidates"], b["candidates"]);
  EXPECT_EQ(a["inputs"], b["inputs"]);
  // With the default --top-sim 8 a shard replays more than the whole plan does,
  // but the best eight are exact in both, so they rank the same.
  const std::string few = kPlan + "--max-pp 4 --json --top 8";
  const auto whole8 = run_stdout(few);
  std::string parts8;
  for (int i = 0; i < 3; ++i) {
    const auto part = path("p8-" + std::to_string(i) + ".csv");
    ASSERT_EQ(run_stdout(few + " --shard " + std::to_string(i) + "/3 -o " + part).code, 0);
    parts8 += " " + part;
  }
  const auto merged8 = run_stdout("merge --json --top 8 " + path("merged8.csv") + parts8);
  ASSERT_EQ(merged8.code, 0) << merged8.out;
  EXPECT_EQ(json::parse(whole8.out)["top"], json::parse(merged8.out)["top"]);
  // A part of a plan with other inputs, a missing part, a part twice: refused, naming the file, nothing written.
  ASSERT_EQ(run_stdout(kPlan + "--max-pp 2 --top-sim 0 --shard 2/3 -o " + path("other.csv")).code, 0);
  const auto other = run("merge " + path("o.csv") + " " + path("part-0.csv") + " " + path("part-1.csv") + " " + path("other.csv"));
  EXPECT_EQ(other.code, 1) << other.out;
  EXPECT_TRUE(has(other.out, path("other.csv") + ": a part of another plan")) << other.out;
  const auto missing = run("merge " + path("o.csv") + " " + path("part-0.csv") + " " + path("part-2.csv"));
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_TRUE(has(missing.out, "shard 1/3 missing")) << missing.out;
  const auto twice = run("merge " + path("o.csv") + parts + " " + path("part-1.csv"));
  EXPECT_EQ(twice.code, 1) << twice.out;
  EXPECT_TRUE(has(twice.out, path("part-1.csv") + ": shard 1/3 again")) << twice.out;
  EXPECT_FALSE(std::filesystem::exists(path("o.csv")));
}

TEST_F(Plan, SweepRowsCarryTensorAndData) {
  const std::string sweep = "sweep --model " + kTiny + " --hardware dgx-a100-80gb -k 1,2 -m 2,4 -s 1f1b,gpipe -j 2 ";
  ASSERT_EQ(run(sweep + "--out " + path("plain.csv")).code, 0);
  const auto r = run(sweep + "-t 1,2 -d 1,2 --out " + path("td.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto plain = lines_of(pipetwin::schedule::read_file(path("plain.csv")));
  const auto td = lines_of(pipetwin::schedule::read_file(path("td.csv")));
  ASSERT_EQ(plain.size(), 1u + 8);
  ASSERT_EQ(td.size(), 1u + 8 * 4);
  EXPECT_TRUE(has(td[0], ",reason,tensor,data")) << td[0];
  std::vector<std::string> ones;
  int by_td[3][3] = {};
  for (std::size_t i = 1; i < td.size(); ++i) {
    const auto cells = cells_of(td[i]);
    ASSERT_EQ(cells.size(), 15u) << td[i];
    const int t = std::stoi(cells[13]), d = std::stoi(cells[14]);
    ASSERT_TRUE((t == 1 || t == 2) && (d == 1 || d == 2)) << td[i];
    ++by_td[t][d];
    EXPECT_EQ(cells[6], "ok") << td[i];
    // The batch column: M x micro-batch size (1) x D.
    EXPECT_EQ(std::stoi(cells[5]), std::stoi(cells[4]) * d) << td[i];
    if (t == 1 && d == 1) ones.push_back(td[i]);
  }
  EXPECT_EQ(by_td[1][1] + by_td[1][2] + by_td[2][1] + by_td[2][2], 32);
  EXPECT_EQ(by_td[2][2], 8);
  ASSERT_EQ(ones.size(), 8u);
  for (std::size_t i = 0; i < ones.size(); ++i) EXPECT_EQ(ones[i], plain[i + 1]) << "T = D = 1 differs from the sweep without -t/-d";
}

// sweep --zero 3 --shard-group 2: the rows with D above 2 are HSDP's, each
// the step simulate gives that configuration; D = 2 shards over both; a D
// that 2 does not divide is a row with its reason.
TEST_F(Plan, SweepShardsInGroupsWhereDIsAboveTheGroup) {
  const std::string model = "--model " + kTiny + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 ";
  const auto r = run("sweep " + model + "-d 2,3,4 --zero 3 --shard-group 2 -j 2 --out " + path("z.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = lines_of(pipetwin::schedule::read_file(path("z.csv")));
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("z.csv.inputs")), "shard group: 2"));
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const auto cells = cells_of(rows[i]);
    const std::string d = cells.at(14);
    if (d == "3") {
      EXPECT_EQ(cells.at(6), "error") << rows[i];
      EXPECT_TRUE(has(rows[i], "--shard-group 2 does not divide --data 3")) << rows[i];
      continue;
    }
    ASSERT_EQ(cells.at(6), "ok") << rows[i];
    const std::string group = d == "4" ? " --shard-group 2" : "";
    const auto s = run_stdout("simulate " + model + "-d " + d + " --batch " + cells.at(5) + " --zero 3" + group + " --json");
    ASSERT_EQ(s.code, 0) << s.out;
    const auto j = json::parse(s.out);
    const double step = j["summary"]["step_time_s"].get<double>();
    EXPECT_NEAR(std::stod(cells.at(7)), step, 1e-6 * step) << rows[i];
    EXPECT_EQ(j["zero"], 3) << s.out;
    if (d == "4") EXPECT_EQ(j["shard_group"], 2) << s.out;
  }
}

// simulate --collective: --json says which algorithm each all-reduce used;
// auto's step is that of the algorithm it chose. A sweep records a
// --collective other than auto in OUT.inputs.
TEST_F(Plan, SimulateSaysWhichAllReduceRan) {
  const std::string sim = "simulate --model " + kTiny + " --hardware dgx-a100-80gb -s 1f1b -k 2 -m 2 -t 2 -d 16 --json ";
  std::map<std::string, json> by;
  for (const std::string c : {"auto", "ring", "tree"}) {
    const auto r = run_stdout(sim + (c == "auto" ? "" : "--collective " + c));
    ASSERT_EQ(r.code, 0) << r.out;
    by[c] = json::parse(r.out);
    EXPECT_EQ(by[c]["collective"], c);
    ASSERT_EQ(by[c]["collectives"]["data_parallel"].size(), 2u) << by[c];
    ASSERT_EQ(by[c]["collectives"]["tensor_parallel"].size(), 1u) << by[c];
    if (c != "auto") {
      for (const auto& used : by[c]["collectives"]["data_parallel"]) EXPECT_EQ(used, c);
      EXPECT_EQ(by[c]["collectives"]["tensor_parallel"][0], c);
    }
  }
  EXPECT_NE(by["ring"]["summary"]["step_time_s"], by["tree"]["summary"]["step_time_s"]);
  const auto& chosen = by["auto"]["collectives"];
  if (chosen["data_parallel"][0] == chosen["data_parallel"][1] && chosen["data_parallel"][0] == chosen["tensor_parallel"][0]) {
    EXPECT_EQ(by["auto"]["summary"]["step_time_s"], by[chosen["data_parallel"][0].get<std::string>()]["summary"]["step_time_s"]);
  }
  const auto sweep = run("sweep --model " + kTiny + " --hardware dgx-a100-80gb -k 2 -m 2 -s 1f1b -d 4 --collective tree --out " +
                         path("s.csv"));
  ASSERT_EQ(sweep.code, 0) << sweep.out;
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("s.csv.inputs")), "\ncollective: tree\n"));
}

namespace {

// The rows of a plan CSV by their index, each a map column -> cell.
std::map<std::string, std::map<std::string, std::string>> plan_rows(const std::string& file) {
  const auto lines = lines_of(pipetwin::schedule::read_file(file));
  std::map<std::string, std::map<std::string, std::string>> rows;
  if (lines.size() < 3) return rows;
  const auto header = cells_of(lines[2]);
  for (std::size_t i = 3; i < lines.size(); ++i) {
    const auto cells = cells_of(lines[i]);
    auto& row = rows[cells.at(0)];
    for (std::size_t c = 0; c < header.size() && c < cells.size(); ++c) row[header[c]] = cells[c];
  }
  return rows;
}

using PlanRow = std::map<std::string, std::string>;

// A candidate's bound (plan --top-sim 0) against its SimGrid replay: no
// faster than the bound, and equal to it where `exact` (nothing after the
// reductions contends); counted in `compared`, and in `alone` where exact.
void expect_within_bound(const std::string& index, const PlanRow& bound, const PlanRow& replay, bool exact, int& compared,
                         int& alone) {
  const double upper = std::stod(bound.at("throughput_samples_per_s")), real = std::stod(replay.at("throughput_samples_per_s"));
  EXPECT_LE(real, upper * (1 + 1e-9)) << "candidate " << index;
  if (exact) {
    EXPECT_NEAR(upper, real, 1e-9 * real) << "candidate " << index;
    ++alone;
  }
  ++compared;
}

}  // namespace

// zb-v, v-half and dualpipe-v put two stages on each rank (V-shaped): the
// plan says V = 2 of them, in its ranking and in every CSV row, as
// interleaved-1f1b's V; 1F1B's is 1.
TEST_F(Plan, SaysTheVOfTheScheduleItRan) {
  const auto r = run_stdout("plan --model " + kTiny +
                            " --hardware dgx-a100-80gb --gpus 4 --global-batch 16 -s 1f1b,zb-v,v-half,dualpipe-v,interleaved-1f1b "
                            "-v 2 --top-sim 0 --top 1000 --json -o " + path("p.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::map<std::string, int> v{{"1f1b", 1}, {"zb-v", 2}, {"v-half", 2}, {"dualpipe-v", 2}, {"interleaved-1f1b", 2}};
  std::map<std::string, int> ranked;
  const auto j = json::parse(r.out);
  for (const auto& c : j["top"]) {
    const auto schedule = c["schedule"].get<std::string>();
    EXPECT_EQ(c["virtual"].get<int>(), v.at(schedule)) << c;
    ++ranked[schedule];
  }
  for (const auto& [schedule, _] : v) EXPECT_GT(ranked[schedule], 0) << schedule << " is not ranked";
  const auto rows = plan_rows(path("p.csv"));
  ASSERT_FALSE(rows.empty());
  for (const auto& [index, row] : rows) EXPECT_EQ(std::stoi(row.at("virtual")), v.at(row.at("schedule"))) << "candidate " << index;
}

// MFU: the model's TFLOP/s per GPU over the A100's dense bf16 peak (312
// TFLOP/s; tiny-llm is bf16), in the JSON, the CSV and the text table.
TEST_F(Plan, SaysTheModelFlopsUtilization) {
  const auto r = run_stdout(kPlan + "--max-pp 2 --top-sim 2 --top 1000 --json -o " + path("p.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  ASSERT_GT(j["top"].size(), 10u);
  for (const auto& c : j["top"]) {
    const double tflops = c["model_tflops_per_gpu"].get<double>();
    EXPECT_GT(tflops, 1) << c;
    EXPECT_NEAR(c["mfu"].get<double>(), tflops / 312, 1e-12) << c;
  }
  int rows = 0;
  for (const auto& [index, row] : plan_rows(path("p.csv"))) {
    if (row.at("status") != "ok") continue;
    EXPECT_NEAR(std::stod(row.at("mfu")), std::stod(row.at("tflops_per_gpu")) / 312, 1e-12) << "candidate " << index;
    ++rows;
  }
  EXPECT_EQ(rows, j["candidates"]["fit"].get<int>());
  const auto text = run(kPlan + "--max-pp 2 --top-sim 2 --top 1");
  ASSERT_EQ(text.code, 0) << text.out;
  const auto lines = lines_of(text.out);
  ASSERT_GE(lines.size(), 6u) << text.out;
  EXPECT_EQ(lines[3], "interval: none (the hardware is not calibrated by calibrate --runs: its figures are the preset's)");
  EXPECT_TRUE(has(lines[4], " TFLOP/s/GPU    MFU ")) << text.out;
  char mfu[32];
  std::snprintf(mfu, sizeof mfu, " %.1f%% ", 100 * j["top"][0]["mfu"].get<double>());
  EXPECT_TRUE(has(lines[5], mfu)) << mfu << " not in " << lines[5];
}

// A hardware file that calibrate --runs wrote carries its prediction error:
// plan gives each figure within it.
TEST_F(Plan, GivesItsFiguresWithinTheCalibrationsError) {
  const std::string hw = path("fitted.yaml");
  std::ofstream(hw) << "preset: dgx-a100-80gb\ncalibration:\n  prediction_error: 0.04\n  fitted_on:\n    - a\n";
  const std::string args = "plan --model " + kTiny + " --hardware " + hw + " --gpus 16 --global-batch 64 --max-pp 2 --top-sim 2 ";
  const auto text = run(args + "--top 1");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(has(text.out, "interval: the hardware's calibration predicted the runs it did not fit within 4.0%: each "
                            "figure below within ±4.0%")) << text.out;
  const auto r = run_stdout(args + "--top 3 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["prediction_error"].get<double>(), 0.04);
  for (const auto& c : j["top"]) {
    const double x = c["throughput_samples_per_s"].get<double>();
    EXPECT_DOUBLE_EQ(c["throughput_samples_per_s_low"].get<double>(), x * 0.96) << c;
    EXPECT_DOUBLE_EQ(c["throughput_samples_per_s_high"].get<double>(), x * 1.04) << c;
  }
}

// With D > 1 the evaluator leaves the gradients' reductions out; the plan
// times them in closed form on its figure (fast-bound), which stays an
// upper bound of SimGrid's for every candidate, and is SimGrid's where one
// stage's reduction is all that follows the last backward (K = 1, 1F1B).
TEST_F(Plan, BoundsTimeTheDataParallelReductions) {
  const std::string args = kPlan + "--max-pp 4 -s 1f1b,interleaved-1f1b,zb-v --top 1000 --json";
  ASSERT_EQ(run_stdout(args + " --top-sim 0 -o " + path("bound.csv")).code, 0);
  ASSERT_EQ(run_stdout(args + " --top-sim 100000 -o " + path("replayed.csv")).code, 0);
  const auto bound = plan_rows(path("bound.csv")), replayed = plan_rows(path("replayed.csv"));
  ASSERT_EQ(bound.size(), replayed.size());
  int compared = 0, alone = 0;
  for (const auto& [index, b] : bound) {
    const auto& s = replayed.at(index);
    if (b.at("engine") != "fast-bound" || b.at("status") != "ok" || s.at("status") != "ok") continue;
    ASSERT_EQ(s.at("engine"), "simgrid") << "candidate " << index;
    EXPECT_GT(std::stod(b.at("dp_exposed_s")), 0) << "candidate " << index;
    expect_within_bound(index, b, s, b.at("pipeline") == "1" && b.at("schedule") == "1f1b", compared, alone);
  }
  EXPECT_GT(compared, 100);
  EXPECT_GT(alone, 10);
}

// ZeRO's stages searched where D > 1: each configuration with every stage
// asked for, ZeRO-3's memory below ZeRO-0's, and the bound of the
// reduce-scatters per micro-batch (ZeRO-2 and 3) an upper bound of SimGrid's
// throughput, equal to it where nothing else follows the backward (K = 1).
TEST_F(Plan, SearchesZerosStagesAndBoundsTheirReductions) {
  const std::string args = kPlan + "--max-pp 2 -s 1f1b --microbatch-sizes 1,2 --zero 0,1,2,3 --top 1000 --json";
  ASSERT_EQ(run_stdout(args + " --top-sim 0 -o " + path("bound.csv")).code, 0);
  ASSERT_EQ(run_stdout(args + " --top-sim 100000 -o " + path("replayed.csv")).code, 0);
  const auto bound = plan_rows(path("bound.csv")), replayed = plan_rows(path("replayed.csv"));
  std::map<std::string, std::map<std::string, double>> headroom;  // configuration -> zero -> headroom
  int compared = 0, alone = 0;
  for (const auto& [index, b] : bound) {
    if (b.at("status") == "error") continue;
    const std::string config = b.at("tensor") + "/" + b.at("pipeline") + "/" + b.at("data") + "/" + b.at("microbatch_size") +
                               "/" + b.at("recompute") + "/" + b.at("sequence_parallel");
    if (!b.at("memory_headroom_gb").empty()) headroom[config][b.at("zero")] = std::stod(b.at("memory_headroom_gb"));
    const auto& s = replayed.at(index);
    if (b.at("zero") < "2" || b.at("engine") != "fast-bound" || b.at("status") != "ok" || s.at("status") != "ok") continue;
    expect_within_bound(index, b, s, b.at("pipeline") == "1", compared, alone);
  }
  EXPECT_GT(compared, 10);
  EXPECT_GT(alone, 2);
  int sharded = 0;
  for (const auto& [config, by_zero] : headroom) {
    if (by_zero.size() != 4) continue;  // D = 1: ZeRO 0 alone
    EXPECT_GT(by_zero.at("3"), by_zero.at("0")) << config;
    EXPECT_GE(by_zero.at("2"), by_zero.at("1")) << config;
    ++sharded;
  }
  EXPECT_GT(sharded, 4);
  // Older plans' files merge still: without the shard_group column; without
  // it and the expert column; without those and the precision and context
  // columns; and before that with their column zero named zero1.
  const auto without_columns = [&](int first, int count) {  // columns first.. (1-based) left out, past the comments
    std::string out;
    int number = 0;
    for (const auto& line : lines_of(pipetwin::schedule::read_file(path("bound.csv")))) {
      std::string kept = line;
      if (++number > 2) {
        std::size_t at = 0, end = 0;
        for (int c = 0; c < first - 1; ++c) at = kept.find(',', at) + 1;
        end = at;
        for (int c = 0; c < count; ++c) end = kept.find(',', end) + 1;
        kept.erase(at, end - at);
      }
      out += kept + "\n";
    }
    return out;
  };
  const std::string no_shard = without_columns(15, 1);
  ASSERT_NE(lines_of(no_shard).at(2).find(",expert,status,"), std::string::npos) << lines_of(no_shard).at(2);
  std::ofstream(path("no-shard.csv")) << no_shard;
  EXPECT_EQ(run("merge " + path("merged00.csv") + " " + path("no-shard.csv")).code, 0);
  const std::string no_expert = without_columns(14, 2);
  ASSERT_NE(lines_of(no_expert).at(2).find(",context,status,"), std::string::npos) << lines_of(no_expert).at(2);
  std::ofstream(path("no-expert.csv")) << no_expert;
  EXPECT_EQ(run("merge " + path("merged0.csv") + " " + path("no-expert.csv")).code, 0);
  std::string old = without_columns(12, 4);
  ASSERT_NE(lines_of(old).at(2).find(",zero,status,"), std::string::npos) << lines_of(old).at(2);
  std::ofstream(path("no-precision.csv")) << old;
  EXPECT_EQ(run("merge " + path("merged.csv") + " " + path("no-precision.csv")).code, 0);
  old.replace(old.find(",zero,"), 6, ",zero1,");
  std::ofstream(path("old.csv")) << old;
  EXPECT_EQ(run("merge " + path("merged1.csv") + " " + path("old.csv")).code, 0);
}

// ZeRO-3 keeping the weights, with FSDP's UNSHARD/RESHARD one stage of a rank
// at a time (V = 2 > N = 1: each stage gathered again for its backwards):
// the bound, which times each UNSHARD's gather alone and the stage's compute
// waiting for it, stays an upper bound of SimGrid's throughput, and the
// gathers cost the candidates time against keeping both stages gathered.
TEST_F(Plan, BoundsTheUnshardsGathers) {
  const std::string args = kPlan + "--max-pp 4 -s interleaved-1f1b -v 2 --zero 3 --reshard-after-forward off --top 1000 --json";
  ASSERT_EQ(run_stdout(args + " --max-active-stages 1 --top-sim 0 -o " + path("bound.csv")).code, 0);
  ASSERT_EQ(run_stdout(args + " --max-active-stages 1 --top-sim 100000 -o " + path("replayed.csv")).code, 0);
  ASSERT_EQ(run_stdout(args + " --max-active-stages 2 --top-sim 100000 -o " + path("both.csv")).code, 0);
  const auto bound = plan_rows(path("bound.csv")), replayed = plan_rows(path("replayed.csv")), both = plan_rows(path("both.csv"));
  int compared = 0, alone = 0, slower = 0;
  for (const auto& [index, b] : bound) {
    const auto& s = replayed.at(index);
    if (b.at("zero") != "3" || b.at("engine") != "fast-bound" || b.at("status") != "ok" || s.at("status") != "ok") continue;
    expect_within_bound(index, b, s, false, compared, alone);
    const auto& w = both.at(index);
    if (w.at("status") == "ok" && std::stod(s.at("throughput_samples_per_s")) < std::stod(w.at("throughput_samples_per_s"))) {
      ++slower;
    }
  }
  EXPECT_GT(compared, 5);
  EXPECT_GT(slower, compared / 2) << "gathering each stage twice a step costs time";
}

// plan --precision bf16,fp8: every configuration in both arithmetics, each
// FP8 candidate faster than its BF16 twin on H100, the column written and read back.
TEST_F(Plan, SearchesPrecisions) {
  const std::string args = "plan --model " + kTiny + " --hardware dgx-h100 --gpus 8 --global-batch 32 --max-pp 2 -s 1f1b "
                           "--microbatch-sizes 1,2 --top-sim 0 --precision bf16,fp8 -o " + path("p.csv");
  const auto r = run(args);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, " prec ")) << r.out;
  const auto rows = plan_rows(path("p.csv"));
  std::map<std::string, std::map<std::string, double>> speed;  // configuration -> precision -> samples/s
  for (const auto& [index, c] : rows) {
    if (c.at("status") != "ok") continue;
    const std::string config = c.at("tensor") + "/" + c.at("pipeline") + "/" + c.at("data") + "/" + c.at("microbatch_size") +
                               "/" + c.at("recompute") + "/" + c.at("sequence_parallel") + "/" + c.at("zero");
    speed[config][c.at("precision")] = std::stod(c.at("throughput_samples_per_s"));
  }
  int pairs = 0;
  for (const auto& [config, by] : speed) {
    ASSERT_EQ(by.size(), 2u) << config;
    EXPECT_GT(by.at("fp8"), by.at("bf16")) << config;
    ++pairs;
  }
  EXPECT_GT(pairs, 4);
  EXPECT_EQ(run("merge " + path("m.csv") + " " + path("p.csv")).code, 0);
  const auto e = run("plan --model " + std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml --hardware h100 --gpus 2 "
                     "--global-batch 8 --precision fp8");
  EXPECT_NE(e.code, 0);
  EXPECT_TRUE(has(e.out, "is built in fp32")) << e.out;
}

// The status words agree: what sweep and plan count as fit, out of memory
// and not runnable are the rows whose status is ok, oom and error.
TEST_F(Plan, CountsEachStatusUnderItsOwnWord) {
  // GPT 1.7B on A100s: micro-batches of 32 sequences, and gpipe's 4 of 4 on one rank, overflow 80 GB.
  const std::string gpt = std::string(PIPETWIN_EXAMPLES_DIR) + "/gpt-1.7b.yaml";
  const auto r = run("sweep --model " + gpt + " --hardware dgx-a100-80gb -k 1,2 -m 4 -s 1f1b,gpipe --microbatch-size 4,32 -j 2 --out " +
                     path("s.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::map<std::string, int> sweep;
  const auto rows = lines_of(pipetwin::schedule::read_file(path("s.csv")));
  for (std::size_t i = 1; i < rows.size(); ++i) ++sweep[cells_of(rows[i]).at(6)];
  EXPECT_EQ(sweep["ok"], 3);
  EXPECT_EQ(sweep["oom"], 5);
  EXPECT_TRUE(has(r.out, "; 3 fit, 5 out of memory, 0 not runnable (status ok, oom, error)) -> ")) << r.out;
  // plan: a split the partitioner cannot make (error) beside ones that do not fit (oom).
  const auto p = run("plan --model " + gpt + " --hardware dgx-a100-80gb --gpus 2 --global-batch 32 --microbatch-sizes 8,16 " +
                     "-s 1f1b,dualpipe-v --top-sim 0 -o " + path("p.csv"));
  ASSERT_EQ(p.code, 0) << p.out;
  std::map<std::string, int> plan;
  for (const auto& [index, row] : plan_rows(path("p.csv"))) ++plan[row.at("status")];
  EXPECT_GT(plan["ok"], 0);
  EXPECT_GT(plan["oom"], 0);
  EXPECT_GT(plan["error"], 0);
  EXPECT_TRUE(has(p.out, ": " + std::to_string(plan["ok"]) + " fit, " + std::to_string(plan["oom"]) + " out of memory, " +
                             std::to_string(plan["error"]) + " not runnable (status ok, oom, error)\n"))
      << p.out;
}

// --precision fp8 in simulate, sweep and plan: a BF16 model's blocks at H100's
// FP8 rate take less time than in BF16; sweep and plan record it in what they
// resume from (their inputs and fingerprint), and each sweep row is the step
// simulate gives.
TEST_F(Plan, Fp8RunsInSimulateSweepAndPlan) {
  const std::string sim = "simulate --model " + kTiny + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 --json";
  const auto [a, b] = without_and_with(sim, "--precision fp8");
  ASSERT_FALSE(a.is_null() || b.is_null());
  EXPECT_EQ(a["precision"], "bf16");
  EXPECT_EQ(b["precision"], "fp8");
  const double step_a = a["summary"]["step_time_s"].get<double>(), step_b = b["summary"]["step_time_s"].get<double>();
  EXPECT_LT(step_b, step_a);
  EXPECT_GT(step_b, step_a / 2);  // at most twice as fast: FP8's rate is BF16's doubled, on the products alone

  const auto r = run("sweep --model " + kTiny + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 --precision fp8 -j 1 --out " + path("s.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("s.csv.inputs")), "precision: fp8"));
  const auto rows = lines_of(pipetwin::schedule::read_file(path("s.csv")));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_NEAR(std::stod(cells_of(rows[1]).at(7)), step_b, 1e-6 * step_b) << rows[1];

  const std::string plan = "plan --model " + kTiny + " --hardware dgx-h100 --gpus 8 --global-batch 32 --max-pp 2 -s 1f1b "
                           "--microbatch-sizes 1 --top-sim 0 --json";
  const auto p16 = run_stdout(plan), p8 = run_stdout(plan + " --precision fp8");
  ASSERT_EQ(p16.code, 0) << p16.out;
  ASSERT_EQ(p8.code, 0) << p8.out;
  const auto j16 = json::parse(p16.out), j8 = json::parse(p8.out);
  EXPECT_NE(j16["inputs"]["fingerprint"], j8["inputs"]["fingerprint"]);
  EXPECT_TRUE(has(j8["inputs"]["description"].get<std::string>(), "precision fp8"));
  EXPECT_GT(j8["top"][0]["throughput_samples_per_s"].get<double>(), j16["top"][0]["throughput_samples_per_s"].get<double>());
}

// -c C in simulate, sweep and plan: C devices per replica (T x C x K x D in
// all), each holding 1/C of every sample's tokens: the same samples a step,
// and plan's candidates fill the GPUs with every C asked for.
TEST_F(Plan, ContextParallelismInSimulateSweepAndPlan) {
  const std::string sim = "simulate --model " + kTiny + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 -d 2 --json";
  const auto [a, b] = without_and_with(sim, "-c 2");
  ASSERT_FALSE(a.is_null() || b.is_null());
  EXPECT_EQ(b["context_parallel"], 2);
  EXPECT_EQ(b["context_attention"], "ring");
  EXPECT_EQ(b["devices"], 8);
  const auto text = run_stdout("simulate --model " + kTiny + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 -d 2 -c 2");
  EXPECT_TRUE(has(text.out, "T=1 C=2 D=2 (8 devices")) << text.out;
  EXPECT_EQ(a["summary"]["samples"], b["summary"]["samples"]);
  EXPECT_LT(b["summary"]["step_time_s"].get<double>(), a["summary"]["step_time_s"].get<double>());

  const auto r = run("sweep --model " + kTiny + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 -d 2 -c 2 -j 1 --out " + path("s.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("s.csv.inputs")), "context: 2"));
  const auto rows = lines_of(pipetwin::schedule::read_file(path("s.csv")));
  ASSERT_EQ(rows.size(), 2u);
  const double step = b["summary"]["step_time_s"].get<double>();
  EXPECT_NEAR(std::stod(cells_of(rows[1]).at(7)), step, 1e-6 * step) << rows[1];

  const auto p = run("plan --model " + kTiny + " --hardware dgx-h100 --gpus 8 --global-batch 32 --max-pp 2 -s 1f1b "
                     "--microbatch-sizes 1 --top-sim 0 --context 1,2 -o " + path("p.csv"));
  ASSERT_EQ(p.code, 0) << p.out;
  std::set<std::string> contexts;
  for (const auto& [index, c] : plan_rows(path("p.csv"))) {
    const int gpus = std::stoi(c.at("tensor")) * std::stoi(c.at("context")) * std::stoi(c.at("pipeline")) * std::stoi(c.at("data"));
    EXPECT_EQ(gpus, 8) << index;
    contexts.insert(c.at("context"));
  }
  EXPECT_EQ(contexts, (std::set<std::string>{"1", "2"}));
}

// -e E in simulate, sweep and plan: a mixture's experts over E replicas, the
// dispatch and combine in each routed block's passes (so a slower step on
// the same samples), and plan's candidates take each E that divides D x C
// and the experts.
TEST_F(Plan, ExpertParallelismInSimulateSweepAndPlan) {
  const std::string moe = path("moe.yaml");
  std::ofstream(moe) << "family: moe\nlayers: 4\nhidden: 256\nheads: 4\nkv_heads: 2\nseq_len: 128\nvocab: 1000\n"
                        "experts: 8\ntop_k: 2\nexpert_ffn_hidden: 512\n";
  const std::string sim = "simulate --model " + moe + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 -d 4 --json";
  const auto [a, b] = without_and_with(sim, "-e 4");
  ASSERT_FALSE(a.is_null() || b.is_null());
  EXPECT_EQ(b["expert_parallel"], 4);
  EXPECT_EQ(b["devices"], 8);
  EXPECT_EQ(a["summary"]["samples"], b["summary"]["samples"]);
  // The dispatch and combine inside each routed block's passes: longer
  // actions (the step itself may be shorter: the experts' gradients are
  // reduced over D / E replicas, and each device steps a quarter of them).
  EXPECT_GT(b["summary"]["busy_s_per_rank"][0].get<double>(), a["summary"]["busy_s_per_rank"][0].get<double>());
  // Each device holds a quarter of the experts: less memory on every stage.
  EXPECT_LT(b["summary"]["memory_per_stage"][0]["peak_bytes"].get<double>(),
            a["summary"]["memory_per_stage"][0]["peak_bytes"].get<double>());
  const auto text = run_stdout("simulate --model " + moe + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 -d 4 -e 4");
  EXPECT_TRUE(has(text.out, "T=1 E=4 D=4 (8 devices")) << text.out;

  const auto r = run("sweep --model " + moe + " --hardware dgx-h100 -s 1f1b -k 2 -m 4 -d 4 -e 4 -j 1 --out " + path("s.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("s.csv.inputs")), "expert: 4"));
  const auto rows = lines_of(pipetwin::schedule::read_file(path("s.csv")));
  ASSERT_EQ(rows.size(), 2u);
  const double step = b["summary"]["step_time_s"].get<double>();
  EXPECT_NEAR(std::stod(cells_of(rows[1]).at(7)), step, 1e-6 * step) << rows[1];

  const auto p = run("plan --model " + moe + " --hardware dgx-h100 --gpus 8 --global-batch 32 --max-pp 2 -s 1f1b "
                     "--microbatch-sizes 1 --top-sim 0 --expert 1,2,4,16 -o " + path("p.csv"));
  ASSERT_EQ(p.code, 0) << p.out;
  std::set<std::string> experts;
  for (const auto& [index, c] : plan_rows(path("p.csv"))) {
    const int e = std::stoi(c.at("expert")), replicas = std::stoi(c.at("data")) * std::stoi(c.at("context"));
    EXPECT_EQ(replicas % e, 0) << index;
    experts.insert(c.at("expert"));
  }
  EXPECT_EQ(experts, (std::set<std::string>{"1", "2", "4"}));  // 16 divides no layout of 8 GPUs, nor the 8 experts
}

// plan --shard-group: HSDP's shard groups searched where ZeRO shards, each
// dividing the replicas and fewer than them; the bound's closed form (a ring
// inside the group, the shard all-reduced across the groups) against the
// SimGrid replay, exact without a pipeline; a candidate's figure that of
// simulate --shard-group.
TEST_F(Plan, SearchesShardGroupsAndBoundsTheirReductions) {
  const std::string args = kPlan + "--max-pp 2 -s 1f1b --microbatch-sizes 1 --zero 0,1,3 --shard-group 2,4,16 --top 1000";
  ASSERT_EQ(run_stdout(args + " --top-sim 0 -o " + path("bound.csv")).code, 0);
  ASSERT_EQ(run_stdout(args + " --top-sim 100000 -o " + path("replayed.csv")).code, 0);
  const auto bound = plan_rows(path("bound.csv")), replayed = plan_rows(path("replayed.csv"));
  std::set<std::string> groups;
  int compared = 0, alone = 0;
  for (const auto& [index, b] : bound) {
    const int g = std::stoi(b.at("shard_group")), replicas = std::stoi(b.at("data")) * std::stoi(b.at("context"));
    if (g > 0) {
      EXPECT_NE(b.at("zero"), "0") << index;
      EXPECT_LT(g, replicas) << index;
      EXPECT_EQ(replicas % g, 0) << index;
    }
    groups.insert(b.at("shard_group"));
    const auto& s = replayed.at(index);
    if (g == 0 || b.at("engine") != "fast-bound" || b.at("status") != "ok" || s.at("status") != "ok") continue;
    expect_within_bound(index, b, s, b.at("pipeline") == "1", compared, alone);
  }
  EXPECT_EQ(groups, (std::set<std::string>{"0", "2", "4"}));  // 16 is never fewer than the replicas of 16 GPUs
  EXPECT_GT(compared, 4);
  EXPECT_GT(alone, 1);
  // One HSDP candidate replayed is simulate --shard-group's figure.
  for (const auto& [index, c] : replayed) {
    if (c.at("shard_group") != "2" || c.at("engine") != "simgrid" || c.at("status") != "ok") continue;
    const auto r = run_stdout("simulate --model " + kTiny + " --hardware dgx-a100-80gb -s 1f1b -k " + c.at("pipeline") +
                            " -m " + c.at("microbatches") + " -t " + c.at("tensor") + " -d " + c.at("data") +
                            " --batch 64 --recompute " + c.at("recompute") + " --zero " + c.at("zero") +
                            " --shard-group 2 --engine simgrid" + (c.at("sequence_parallel") == "1" ? " --sequence-parallel" : "") +
                            " --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const json j = json::parse(r.out);
    const double step = std::stod(c.at("step_time_s"));
    EXPECT_NEAR(j["summary"]["step_time_s"].get<double>(), step, 1e-9 * step) << "candidate " << index;
    break;
  }
}
