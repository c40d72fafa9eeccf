// The `pipetwin` command line, as a user runs it: outputs, exit codes, and one
// clear error line for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <thread>
#include <cstdio>
#include <filesystem>

#include "schedule/io.hpp"
#include "schedule/trace.hpp"
#include "tests/support/shell.hpp"

namespace {

using pipetwin::test::has;
using pipetwin::test::Result;
using pipetwin::test::run_shell;

Result run(const std::string& args) {
  return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1");
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(Cli, ScheduleGridShowsTheDryRunAndTheAnalyticBubble) {
  const auto r = run("schedule --schedule 1f1b --ranks 4 --microbatches 8 --format grid");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "t=21  0B7")) << r.out;
  EXPECT_TRUE(has(r.out, "steps: 22")) << r.out;
  EXPECT_TRUE(has(r.out, "bubble: 27.27% overall (analytic (K-1)/(M+K-1) = 27.27%)")) << r.out;
  EXPECT_TRUE(has(r.out, "peak stashed micro-batches per stage: 4 3 2 1")) << r.out;
}

TEST_F(Cli, EveryFormatWrittenWithOutValidates) {
  for (const std::string format : {"text", "csv", "json"}) {
    const auto file = path("s." + format);
    const auto w = run("schedule -s zb-h1 -k 3 -m 6 --recompute full --format " + format + " --out " + file);
    ASSERT_EQ(w.code, 0) << w.out;
    const auto v = run("validate " + file);
    EXPECT_EQ(v.code, 0) << v.out;
    EXPECT_TRUE(has(v.out, "valid: ")) << v.out;
    EXPECT_TRUE(has(v.out, "K=3 V=1 M=6, recompute full")) << v.out;
  }
  const auto j = run("validate --json " + path("s.json"));
  EXPECT_EQ(j.code, 0);
  EXPECT_TRUE(has(j.out, "\"valid\": true")) << j.out;
}

TEST_F(Cli, BrokenScheduleGivesTheGridAndExitCode1) {
  const auto file = path("broken.txt");
  pipetwin::schedule::write_file_atomic(file,
                                        "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1\n"
                                        "rank 1: 1RECV_F1 1F1 1RECV_F0 1F0 1B0 1SEND_B0 1B1 1SEND_B1\n");
  const auto r = run("validate " + file);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "pipetwin: error: invalid schedule: rank 0, step 2: deadlock")) << r.out;
  EXPECT_TRUE(has(r.out, "<-- ERROR HERE")) << r.out;

  // The same schedule as docs/schedule-ir.md shows it, from examples/.
  const auto example = run("validate " + std::string(PIPETWIN_EXAMPLES_DIR) + "/deadlock.txt");
  EXPECT_EQ(example.code, 1) << example.out;
  const auto from = [](const std::string& out) {
    const auto at = out.find("pipetwin: error:");
    return at == std::string::npos ? out : out.substr(at);
  };
  EXPECT_TRUE(has(example.out, "rank 0, step 2: deadlock")) << example.out;
  EXPECT_EQ(from(example.out), from(r.out));
}

TEST_F(Cli, BadInputIsOneClearErrorAndNonZeroExit) {
  const auto missing = run("validate " + path("nope.txt"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(has(missing.out, "nope.txt: cannot open")) << missing.out;

  pipetwin::schedule::write_file_atomic(path("bad.csv"), "0F0,0B0\n1F0,1Q0\n");
  const auto bad = run("validate " + path("bad.csv"));
  EXPECT_EQ(bad.code, 1);
  EXPECT_TRUE(has(bad.out, "bad.csv:2: column 2")) << bad.out;

  const auto unknown = run("schedule --schedule chimera --ranks 2 --microbatches 4");
  EXPECT_NE(unknown.code, 0);
  EXPECT_TRUE(has(unknown.out, "gpipe") && has(unknown.out, "zb-h1")) << unknown.out;

  const auto shape = run("schedule -s interleaved-1f1b -k 3 -m 7 -v 2");
  EXPECT_EQ(shape.code, 1);
  EXPECT_TRUE(has(shape.out, "needs M to be a multiple of its rounds max(1, M / K) = 2")) << shape.out;

  const auto zero = run("schedule -s gpipe -k 0 -m 4");
  EXPECT_NE(zero.code, 0);
  EXPECT_TRUE(has(zero.out, "--ranks")) << zero.out;

  const auto no_dir = run("schedule -s gpipe -k 2 -m 2 --out " + path("no/such/dir/s.txt"));
  EXPECT_EQ(no_dir.code, 1);
  EXPECT_FALSE(std::filesystem::exists(path("no/such/dir/s.txt")));
}

TEST_F(Cli, PartitionComparesWithUniformAndFlowsIntoTheSchedule) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/amoebanet-d-18-256.yaml";
  const auto r = run("partition --model " + model + " --hardware v100 --ranks 8 --microbatches 8");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "optimal partition")) << r.out;
  EXPECT_TRUE(has(r.out, "vs uniform")) << r.out;
  EXPECT_TRUE(has(r.out, "optimal is ") && has(r.out, "% faster at the bottleneck")) << r.out;
  const auto u = run("partition --model " + model + " --hardware v100 --ranks 8 --method uniform");
  EXPECT_TRUE(has(u.out, "uniform is ") && has(u.out, "% slower at the bottleneck")) << u.out;  // the optimum is never beaten
  const auto j = run("partition --json --model " + model + " --hardware v100 --ranks 8");
  EXPECT_TRUE(has(j.out, "\"bottleneck_s\"")) << j.out;
  const auto s = run("schedule -s 1f1b -k 4 -m 8 --format text --model " + std::string(PIPETWIN_EXAMPLES_DIR) +
                     "/transformer-24.yaml --hardware v100");
  EXPECT_EQ(s.code, 0) << s.out;
  EXPECT_TRUE(has(s.out, "partition 0:8 8:14 14:20 20:26")) << s.out;
  const auto oom = run("partition --model " + std::string(PIPETWIN_EXAMPLES_DIR) +
                       "/transformer-24.yaml --hardware v100 -k 4 -m 32");
  EXPECT_EQ(oom.code, 1);
  EXPECT_TRUE(has(oom.out, "over by")) << oom.out;
  const auto mixed = run("partition --model " + model + " --hardware " + std::string(PIPETWIN_EXAMPLES_DIR) +
                         "/v100-p100-mixed.yaml -k 4");
  EXPECT_EQ(mixed.code, 0) << mixed.out;
  EXPECT_TRUE(has(mixed.out, "on V100 PCIe (16 GB), V100 PCIe (16 GB), P100 (16 GB), P100 (16 GB)")) << mixed.out;
  const auto too_few = run("partition --model " + model + " --hardware " + std::string(PIPETWIN_EXAMPLES_DIR) +
                           "/v100-p100-mixed.yaml -k 8");
  EXPECT_EQ(too_few.code, 1) << too_few.out;
  EXPECT_TRUE(has(too_few.out, "lists 4 devices (devices:), not enough for 8 ranks")) << too_few.out;
  const auto bad_hw = run("partition --model " + model + " --hardware tpu-v9 -k 2");
  EXPECT_EQ(bad_hw.code, 1);
  EXPECT_TRUE(has(bad_hw.out, "neither a preset")) << bad_hw.out;
}

TEST_F(Cli, SimulatePrintsTheSummaryAndWritesATrace) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  const auto r = run("simulate --model " + model + " --hardware a100 -s 1f1b -k 2 -m 4 --batch 8 --trace " + path("t.json"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "step time")) << r.out;
  EXPECT_TRUE(has(r.out, "verdict      fits in memory")) << r.out;
  const auto trace = pipetwin::schedule::read_chrome_trace(path("t.json"));
  EXPECT_EQ(trace.timeline.ranks.size(), 2u);
  EXPECT_EQ(trace.metadata["schedule"], "1f1b");
  const auto j = run("simulate --json --model " + model + " --hardware a100 -s gpipe -k 2 -m 4");
  EXPECT_EQ(j.code, 0) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_GT(doc["summary"]["step_time_s"].get<double>(), 0);
  EXPECT_EQ(doc["summary"]["memory_per_stage"].size(), 2u);
  const auto bad_batch = run("simulate --model " + model + " --hardware a100 -s gpipe -k 2 -m 4 --batch 6");
  EXPECT_EQ(bad_batch.code, 1);
  EXPECT_TRUE(has(bad_batch.out, "--batch 6 does not split into --microbatches 4")) << bad_batch.out;
  const auto shared = run("simulate --model " + model + " --hardware cpu -s 1f1b -k 4 -m 8");
  EXPECT_TRUE(has(shared.out, "simgrid 3.32.0: contention: ")) << shared.out;  // 4 ranks on 2 cores
  const auto a100 = run("simulate --model " + model + " --hardware a100 -s 1f1b -k 4 -m 8");
  EXPECT_TRUE(has(a100.out, "fast critical path: no shared resource")) << a100.out;
  const auto too_many = run("simulate --model " + model + " --hardware a100 -s gpipe -k 8 -m 4");
  EXPECT_EQ(too_many.code, 1);
  EXPECT_TRUE(has(too_many.out, "a stage needs at least one layer")) << too_many.out;
}

TEST_F(Cli, AutoFallsBackToSimGridWhenTransfersShareALink) {
  // AmoebaNet-D on 8 PCIe V100s, micro-batches of 8 images: stage 0 sends its
  // next activation while the previous one still crosses dev0's PCIe link.
  const std::string args = "simulate --json --model " + std::string(PIPETWIN_EXAMPLES_DIR) +
                           "/amoebanet-d-18-256.yaml --hardware v100 -s 1f1b -k 8 -m 32 --batch 256 --engine ";
  const auto run_json = [&](const std::string& engine) {
    const auto r = run(args + engine);
    EXPECT_EQ(r.code, 0) << r.out;
    return nlohmann::json::parse(r.out);
  };
  const auto automatic = run_json("auto"), fast = run_json("fast"), simgrid = run_json("simgrid");
  EXPECT_EQ(automatic["summary"]["engine"].get<std::string>().rfind("simgrid", 0), 0u) << automatic.dump();
  EXPECT_TRUE(has(automatic["engine_reason"].get<std::string>(), "contention: transfers ")) << automatic.dump();
  EXPECT_TRUE(has(automatic["engine_reason"].get<std::string>(), " share link dev0-sw0 (up)")) << automatic.dump();
  EXPECT_TRUE(has(fast["engine_reason"].get<std::string>(), "it ignores contention")) << fast.dump();
  // auto answers what SimGrid answers; the fast path, which ignores the sharing, predicts a shorter step.
  const double fast_step = fast["summary"]["step_time_s"], sg_step = simgrid["summary"]["step_time_s"];
  EXPECT_DOUBLE_EQ(automatic["summary"]["step_time_s"].get<double>(), sg_step);
  EXPECT_GT(sg_step, fast_step * (1 + 1e-4));
  // A sweep over the same configuration sends it to SimGrid too.
  const auto sweep = run("sweep --model " + std::string(PIPETWIN_EXAMPLES_DIR) +
                         "/amoebanet-d-18-256.yaml --hardware v100 -s 1f1b -k 8 -m 32 --microbatch-size 8 --out " + path("c.csv"));
  EXPECT_EQ(sweep.code, 0) << sweep.out;
  EXPECT_TRUE(has(sweep.out, "0 on the fast path, 1 in SimGrid")) << sweep.out;
  const std::string csv = pipetwin::schedule::read_file(path("c.csv"));
  char step[64];
  std::snprintf(step, sizeof step, ",ok,%.9g,", sg_step);
  EXPECT_TRUE(has(csv, "1f1b,none,8,1,32,256" + std::string(step))) << csv;
  EXPECT_TRUE(has(csv, ",simgrid,")) << csv;
}

TEST_F(Cli, SweepWritesOneRowPerConfigurationAndResumes) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  const std::string args = "sweep --model " + model + " --hardware a100 -k 1,2,8 -m 1,4 -s gpipe,1f1b --out " + path("r.csv");
  const auto first = run(args);
  EXPECT_EQ(first.code, 0) << first.out;
  const std::string full = pipetwin::schedule::read_file(path("r.csv"));
  int lines = 0;
  for (const char c : full) lines += c == '\n';
  EXPECT_EQ(lines, 1 + 12);
  EXPECT_TRUE(has(full, "gpipe,none,8,1,1,1,error,")) << full;  // 8 stages, 6 layers
  EXPECT_TRUE(has(first.out, "on the fast path")) << first.out;
  // The same grid in SimGrid: the same numbers (the fast path is exact without contention).
  const auto sg = run("sweep --model " + model + " --hardware a100 -k 1,2,8 -m 1,4 -s gpipe,1f1b --engine simgrid --out " +
                      path("sg.csv"));
  EXPECT_EQ(sg.code, 0) << sg.out;
  std::string fast_numbers = full, sg_numbers = pipetwin::schedule::read_file(path("sg.csv"));
  for (auto* text : {&fast_numbers, &sg_numbers}) {
    for (const std::string engine : {",fast,", ",simgrid,"}) {
      for (std::size_t at; (at = text->find(engine)) != std::string::npos;) text->replace(at, engine.size(), ",E,");
    }
  }
  EXPECT_EQ(fast_numbers, sg_numbers);
  // Cut the file after 5 rows, as an interrupted sweep leaves it: the rerun completes it identically.
  std::string cut;
  int kept = 0;
  for (std::size_t i = 0; i < full.size() && kept < 6; ++i) {
    cut += full[i];
    kept += full[i] == '\n';
  }
  pipetwin::schedule::write_file_atomic(path("r.csv"), cut);
  const auto second = run(args);
  EXPECT_TRUE(has(second.out, "5 resumed")) << second.out;
  EXPECT_EQ(pipetwin::schedule::read_file(path("r.csv")), full);
  // A row edited by hand (its step time not a number) is not taken back as done.
  {
    std::string damaged = cut;
    const auto row = damaged.find('\n') + 1;  // the first row after the header
    std::size_t at = row;
    for (int c = 0; c < 7; ++c) at = damaged.find(',', at) + 1;  // the step time's cell
    damaged.replace(at, damaged.find(',', at) - at, "banana");
    pipetwin::schedule::write_file_atomic(path("d.csv"), damaged);
    std::filesystem::copy_file(path("r.csv.inputs"), path("d.csv.inputs"));
    std::string on_damaged = args;
    on_damaged.replace(on_damaged.find(path("r.csv")), path("r.csv").size(), path("d.csv"));
    const auto refused = run(on_damaged);
    EXPECT_EQ(refused.code, 1) << refused.out;
    EXPECT_TRUE(has(refused.out, "d.csv:2: column 'step_time_s' is 'banana': not a row this sweep wrote")) << refused.out;
    EXPECT_EQ(pipetwin::schedule::read_file(path("d.csv")), damaged);
  }
  // Rows computed for other inputs are not resumed: another hardware, or a file
  // whose contents changed, is refused naming it, and the rows stay as they were.
  const auto other_hw = run("sweep --model " + model + " --hardware h100 -k 1,2,8 -m 1,4 -s gpipe,1f1b --out " + path("r.csv"));
  EXPECT_EQ(other_hw.code, 1);
  EXPECT_TRUE(has(other_hw.out, "r.csv: its rows were computed with another hardware")) << other_hw.out;
  EXPECT_TRUE(has(other_hw.out, "'hardware: a100 (preset)', now 'hardware: h100 (preset)'")) << other_hw.out;
  const std::string copy = path("m.yaml");
  pipetwin::schedule::write_file_atomic(copy, pipetwin::schedule::read_file(model));
  const std::string on_copy = "sweep --model " + copy + " --hardware a100 -k 1 -m 1 -s gpipe --out " + path("c.csv");
  EXPECT_EQ(run(on_copy).code, 0);
  pipetwin::schedule::write_file_atomic(copy, pipetwin::schedule::read_file(model) + "# edited\n");
  const auto edited = run(on_copy);
  EXPECT_EQ(edited.code, 1);
  EXPECT_TRUE(has(edited.out, "c.csv: its rows were computed with another model")) << edited.out;
  std::filesystem::remove(path("c.csv.inputs"));
  const auto unknown = run(on_copy);
  EXPECT_EQ(unknown.code, 1);
  EXPECT_TRUE(has(unknown.out, "no " + path("c.csv.inputs") + " beside it")) << unknown.out;
  EXPECT_EQ(pipetwin::schedule::read_file(path("r.csv")), full);
  pipetwin::schedule::write_file_atomic(path("other.csv"), "a,b\n1,2\n");
  const auto wrong = run("sweep --model " + model + " --hardware a100 -k 1 -m 1 -s gpipe --out " + path("other.csv"));
  EXPECT_EQ(wrong.code, 1);
  EXPECT_TRUE(has(wrong.out, "header differs")) << wrong.out;
}

TEST_F(Cli, SweepRowsSayWhyAConfigurationCannotRun) {
  // Transformer-24 on 4 V100s: gpipe with M=32 stashes too much to fit (an `oom` row naming the
  // stage and the overflow), 32 ranks are more than its 26 layers (an `error` row); both engines.
  for (const std::string engine : {"auto", "simgrid"}) {
    const auto out = path("rows_" + engine + ".csv");
    const auto r = run("sweep --model " + std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-24.yaml --hardware v100 -k 4,32 " +
                       "-m 1,32 -s gpipe --engine " + engine + " --out " + out);
    EXPECT_EQ(r.code, 0) << r.out;
    const std::string csv = pipetwin::schedule::read_file(out);
    EXPECT_TRUE(has(csv, "\ngpipe,none,4,1,1,1,ok,")) << csv;
    EXPECT_TRUE(has(csv, "\ngpipe,none,4,1,32,32,oom,,,,,,")) << csv;
    EXPECT_TRUE(has(csv, "at best stage ") && has(csv, "over by")) << csv;
    EXPECT_TRUE(has(csv, "\ngpipe,none,32,1,1,1,error,,,,,,")) << csv;
    EXPECT_TRUE(has(csv, "cannot cut transformer-24 (26 layers) into 32 stages")) << csv;
  }
}

TEST_F(Cli, SweepKilledHalfWayResumesWithoutLosingOrDuplicatingRows) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  std::string sizes;
  // Large enough to outlast the first write (after 2 s): 69,120 configurations
  // took 2.4 s on an idle 2-core machine, too close to it.
  for (int b = 1; b <= 480; ++b) sizes += (b > 1 ? "," : "") + std::to_string(b);
  const std::string grid = "sweep --model " + model + " --hardware a100 -k 1,2,3,4,5,6 -m 1,2,3,4,5,6,7,8,12,16,24,32 " +
                           "-s gpipe,1f1b,zb-h1 --recompute none,full --microbatch-size " + sizes + " --out ";
  const auto whole = run(grid + path("whole.csv"));  // 207,360 configurations, uninterrupted
  ASSERT_EQ(whole.code, 0) << whole.out;
  // The same sweep, killed (SIGKILL) once its first rows are on disk.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string cmd = std::string(PIPETWIN_BINARY) + " " + grid + path("killed.csv") + " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(path("killed.csv")) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string partial = pipetwin::schedule::read_file(path("killed.csv"));
  const std::string full = pipetwin::schedule::read_file(path("whole.csv"));
  ASSERT_FALSE(partial.empty());
  EXPECT_EQ(partial.back(), '\n');         // whole rows only
  EXPECT_LT(partial.size(), full.size());  // killed half-way
  const auto resumed = run(grid + path("killed.csv"));
  EXPECT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_TRUE(has(resumed.out, "resumed")) << resumed.out;
  EXPECT_EQ(pipetwin::schedule::read_file(path("killed.csv")), full);  // nothing lost, nothing twice
}

TEST_F(Cli, HelpOnEverySubcommand) {
  for (const std::string sub : {"schedule", "validate", "info", "partition", "simulate"}) {
    const auto r = run(sub + " --help");
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_TRUE(has(r.out, "--json")) << r.out;
  }
}

TEST_F(Cli, InfoNamesTheDependencies) {
  const auto r = run("info --json");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"simgrid\"", "\"libtorch\"", "\"nccl\"", "\"c10d_gloo\": true"}) {
    EXPECT_TRUE(has(r.out, key)) << key << "\n" << r.out;
  }
}

TEST_F(Cli, InfoPresetsListsEachWithItsFiguresSourceAndFile) {
  const auto r = run("info --presets");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "presets: no folder")) << r.out;
  for (const char* line : {"a100            A100 SXM4 80GB          312       19.5    80 GB  embedded",
                           "cpu             cpu core               0.05       0.05    24 GB  embedded",
                           "  source: NVIDIA Selene: DGX A100 80 GB nodes"}) {
    EXPECT_TRUE(has(r.out, line)) << line << "\n" << r.out;
  }
  const auto j = run("info --presets --json");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_TRUE(has(j.out, "\"path\": \"embedded:presets/dgx-h100.yaml\"")) << j.out;
  EXPECT_TRUE(has(j.out, "\"peak_flops_half\": 989000000000000.0")) << j.out;
}

TEST_F(Cli, APresetsFolderComesFirstBeforeOrAfterTheCommand) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  std::filesystem::create_directories(path("mine"));
  pipetwin::schedule::write_file_atomic(path("mine/a100.yaml"), "preset: a100\ndevice: {memory_gb: 0.001, memory_reserve_gb: 0}\n");
  pipetwin::schedule::write_file_atomic(path("mine/tiny.yaml"), "preset: cpu\nsource: a tiny host\n");
  const auto listed = run("--presets-dir " + path("mine") + " info --presets");
  ASSERT_EQ(listed.code, 0) << listed.out;
  EXPECT_TRUE(has(listed.out, "presets: " + path("mine") + ", then the embedded ones")) << listed.out;
  EXPECT_TRUE(has(listed.out, "0.001 GB  " + path("mine/a100.yaml"))) << listed.out;
  EXPECT_TRUE(has(listed.out, "24 GB  " + path("mine/tiny.yaml"))) << listed.out;
  // After the command too; the user's a100 (1 MB) wins over the built-in one.
  const auto sim = run("simulate --model " + model + " --hardware a100 -s 1f1b -k 2 -m 4 --presets-dir " + path("mine"));
  EXPECT_EQ(sim.code, 1) << sim.out;
  EXPECT_TRUE(has(sim.out, "needs 0.011 GB of 0.001 GB")) << sim.out;
  const auto plain = run("simulate --model " + model + " --hardware a100 -s 1f1b -k 2 -m 4");
  EXPECT_EQ(plain.code, 0) << plain.out;
  EXPECT_TRUE(has(plain.out, "verdict      fits in memory")) << plain.out;
  // The environment variable, and a malformed file there named with its field.
  pipetwin::schedule::write_file_atomic(path("mine/tiny.yaml"), "preset: cpu\ndevice:\n  memory_gb: lots\n");
  const auto bad = run_shell("PIPETWIN_PRESETS=" + path("mine") + " " + PIPETWIN_BINARY + " simulate --model " + model +
                             " --hardware tiny -s 1f1b -k 2 -m 4 2>&1");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(has(bad.out, "error: " + path("mine/tiny.yaml") + ":3: field 'device.memory_gb': expected a number"))
      << bad.out;
  const auto missing = run("--presets-dir " + path("none") + " info --presets");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_TRUE(has(missing.out, "--presets-dir")) << missing.out;
}

TEST_F(Cli, SweepWithAFixedBatchSplitsItIntoMMicroBatches) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  const auto r = run("sweep --model " + model + " --hardware cpu -k 1,2 -m 1,2,4 -s 1f1b --batch 16 --out " + path("b.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto text = pipetwin::schedule::read_file(path("b.csv"));
  int rows = 0;
  for (std::size_t at = text.find('\n'); at != std::string::npos && at + 1 < text.size(); at = text.find('\n', at + 1)) {
    ++rows;
    const auto line = text.substr(at + 1, text.find('\n', at + 1) - at - 1);
    EXPECT_TRUE(has(line, ",16,ok,")) << line;  // the batch column, every row
  }
  EXPECT_EQ(rows, 6);
  const auto uneven = run("sweep --model " + model + " --hardware cpu -k 1 -m 3 -s 1f1b --batch 16 --out " + path("c.csv"));
  EXPECT_EQ(uneven.code, 1);
  EXPECT_TRUE(has(uneven.out, "--batch 16 does not split into 3 equal micro-batches")) << uneven.out;
  EXPECT_FALSE(std::filesystem::exists(path("c.csv")));
  const auto both = run("sweep --model " + model + " --hardware cpu -k 1 -m 2 -s 1f1b --batch 16 --microbatch-size 2 --out " +
                        path("d.csv"));
  EXPECT_EQ(both.code, 2);
}

// `pipetwin` links no LibTorch: `run` is answered by pipetwin-exec, next to it.
TEST_F(Cli, RunIsHandedToTheExecutorNextToPipetwin) {
  const auto help = run("run --help");
  EXPECT_EQ(help.code, 0) << help.out;
  for (const char* option : {"--steps", "--device", "--master-port", "--save-weights"}) {
    EXPECT_TRUE(has(help.out, option)) << option << "\n" << help.out;
  }
  const auto listed = run("--help");
  EXPECT_TRUE(has(listed.out, "run")) << listed.out;
  // A bad option is refused by the executor, as a command-line error.
  const auto bad = run("run --model x.yaml -s 1f1b -k 2 -m 2 --frobnicate");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(has(bad.out, "--frobnicate")) << bad.out;
}

TEST_F(Cli, RunWithoutTheExecutorIsAClearError) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  const auto r = run_shell("PIPETWIN_EXEC=" + path("no-such-executor") + " " + PIPETWIN_BINARY + " run --model " + model +
                           " -s 1f1b -k 2 -m 2 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "pipetwin: error: pipetwin run needs the executor " + path("no-such-executor"))) << r.out;
  // info still answers what this binary knows, and says why the rest is missing.
  const auto info = run_shell("PIPETWIN_EXEC=" + path("no-such-executor") + " " + PIPETWIN_BINARY + " info --json 2>&1");
  EXPECT_EQ(info.code, 0) << info.out;
  EXPECT_TRUE(has(info.out, "\"simgrid\"")) << info.out;
  EXPECT_TRUE(has(info.out, "\"executor\": \"unavailable: no " + path("no-such-executor"))) << info.out;
}

// --schedule takes a schedule file as well as a generator's name: the file
// gives K, V, M and the placement; an option that contradicts it is refused.
TEST_F(Cli, AScheduleFileIsSimulatedAsTheGeneratorItCameFrom) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  ASSERT_EQ(run("schedule -s 1f1b -k 2 -m 4 --format csv --compute-only --out " + path("s.csv")).code, 0);
  const auto from_file = run("simulate --model " + model + " --hardware cpu -s " + path("s.csv") + " --json");
  const auto generated = run("simulate --model " + model + " --hardware cpu -s 1f1b -k 2 -m 4 --json");
  ASSERT_EQ(from_file.code, 0) << from_file.out;
  ASSERT_EQ(generated.code, 0) << generated.out;
  const auto a = nlohmann::json::parse(from_file.out), b = nlohmann::json::parse(generated.out);
  EXPECT_EQ(a["summary"]["step_time_s"], b["summary"]["step_time_s"]);
  EXPECT_EQ(a["summary"]["memory_per_stage"], b["summary"]["memory_per_stage"]);
  EXPECT_EQ(a["summary"]["busy_s_per_rank"], b["summary"]["busy_s_per_rank"]);
  EXPECT_EQ(a["ranks"], 2);
  EXPECT_EQ(a["microbatches"], 4);
  // Its trace records the Program that ran and the optimizer whose state the step moves.
  ASSERT_EQ(run("simulate --model " + model + " --hardware cpu -s " + path("s.csv") + " --optimizer sgd --trace " +
                path("t.json")).code, 0);
  const auto meta = pipetwin::schedule::read_chrome_trace(path("t.json")).metadata;
  EXPECT_EQ(meta["optimizer"], "sgd");
  EXPECT_EQ(pipetwin::schedule::parse_text(meta["program"].get<std::string>(), "program").ranks.size(), 2u);
  const auto k3 = run("simulate --model " + model + " --hardware cpu -s " + path("s.csv") + " -k 3");
  EXPECT_EQ(k3.code, 1);
  EXPECT_TRUE(has(k3.out, "--ranks 3 contradicts the schedule file " + path("s.csv") + ", which has 2 ranks")) << k3.out;
  const auto full = run("simulate --model " + model + " --hardware cpu -s " + path("s.csv") + " --recompute full --json");
  EXPECT_EQ(full.code, 0) << full.out;  // a CSV has no recompute of its own: the option's applies
  EXPECT_TRUE(has(full.out, "\"recompute\": \"full\"")) << full.out;
  const auto no_m = run("simulate --model " + model + " --hardware cpu -s 1f1b -k 2");
  EXPECT_EQ(no_m.code, 2);
  EXPECT_TRUE(has(no_m.out, "--microbatches (with a schedule generator) is required")) << no_m.out;
  const auto neither = run("simulate --model " + model + " --hardware cpu -s " + path("missing.csv") + " -k 2 -m 2");
  EXPECT_EQ(neither.code, 2);
  EXPECT_TRUE(has(neither.out, "is neither a schedule generator")) << neither.out;
  const auto part = run("partition --model " + model + " --hardware cpu -s " + path("s.csv") + " --json");
  EXPECT_EQ(part.code, 0) << part.out;
  EXPECT_TRUE(has(part.out, "\"ranks\": 2")) << part.out;
}

TEST_F(Cli, ScheduleListNamesEveryGeneratorWithItsClosedForms) {
  const auto r = run("schedule --list");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* name :
       {"gpipe", "1f1b", "interleaved-1f1b", "interleaved-zb", "looped-bfs", "zb-h1", "zb-h2", "zb-v", "dualpipe-v", "v-half",
        "v-min", "pipedream", "combined-1f1b"}) {
    EXPECT_TRUE(has(r.out, std::string("\n") + name + "\n") || r.out.rfind(std::string(name) + "\n", 0) == 0) << name;
  }
  EXPECT_TRUE(has(r.out, "(K-1)/(M+K-1) of the step")) << r.out;
  EXPECT_TRUE(has(r.out, "(K-1)/(3M+K-1) of the step with F = I = W")) << r.out;
  const auto j = run("schedule --list --json");
  ASSERT_EQ(j.code, 0) << j.out;
  const auto list = nlohmann::json::parse(j.out);
  ASSERT_EQ(list.size(), 13u);
  EXPECT_EQ(list[7]["name"], "zb-v");
  EXPECT_EQ(list[7]["fixed_stages_per_rank"], 2);
  EXPECT_EQ(list[8]["name"], "dualpipe-v");
  EXPECT_EQ(list[8]["fixed_stages_per_rank"], 2);
  EXPECT_EQ(list[9]["name"], "v-half");
  EXPECT_EQ(list[9]["fixed_stages_per_rank"], 2);
  EXPECT_EQ(list[10]["name"], "v-min");
  EXPECT_EQ(list[10]["fixed_stages_per_rank"], 2);
  EXPECT_EQ(run("schedule -k 2 -m 2").code, 2);  // without --list, a generator is needed
}

// --virtual reaches every generator with several stages per rank, not only
// interleaved-1f1b; a V-shaped one's row says its own 2, whatever -v is.
TEST_F(Cli, SweepGivesVToEveryGeneratorWithChunks) {
  const std::string model = std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-small.yaml";
  const auto r = run("sweep --model " + model + " --hardware cpu -k 2 -m 4 -s interleaved-zb,looped-bfs,1f1b,zb-v -v 2 --out " +
                     path("v.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto text = pipetwin::schedule::read_file(path("v.csv"));
  EXPECT_TRUE(has(text, "\ninterleaved-zb,none,2,2,4,4,ok,")) << text;
  EXPECT_TRUE(has(text, "\nlooped-bfs,none,2,2,4,4,ok,")) << text;
  EXPECT_TRUE(has(text, "\n1f1b,none,2,1,4,4,ok,")) << text;
  EXPECT_TRUE(has(text, "\nzb-v,none,2,2,4,4,ok,")) << text;
  const auto v3 = run("sweep --model " + model + " --hardware cpu -k 2 -m 4 -s zb-v -v 3 --out " + path("v3.csv"));
  ASSERT_EQ(v3.code, 0) << v3.out;
  EXPECT_TRUE(has(pipetwin::schedule::read_file(path("v3.csv")), "\nzb-v,none,2,2,4,4,ok,"));
}

// An imported schedule is drawn and written as a generated one: a
// generator's PyTorch CSV (compute only, no STEP) read back draws the same
// grid, and its text written back reads as the same Program.
TEST_F(Cli, ScheduleFromAFileDrawsAndRewritesIt) {
  ASSERT_EQ(run("schedule -s zb-h2 -k 4 -m 8 --format pytorch-csv --out " + path("zb.csv")).code, 0);
  const auto grid = run("schedule --from " + path("zb.csv"));
  ASSERT_EQ(grid.code, 0) << grid.out;
  const auto generated = run("schedule -s zb-h2 -k 4 -m 8");
  const auto table = [](const std::string& out) { return out.substr(out.find("rank 0"), out.find("steps:") - out.find("rank 0")); };
  EXPECT_EQ(table(grid.out), table(generated.out));
  EXPECT_TRUE(has(grid.out, "imported: K=4 ranks, V=1, M=8 micro-batches")) << grid.out;
  ASSERT_EQ(run("schedule -s interleaved-1f1b -k 2 -m 4 -v 2 --recompute full --format text --out " + path("a.txt")).code, 0);
  ASSERT_EQ(run("schedule --from " + path("a.txt") + " --format text --out " + path("b.txt")).code, 0);
  EXPECT_EQ(pipetwin::schedule::read_file(path("a.txt")), pipetwin::schedule::read_file(path("b.txt")));
  // The file gives the shape and its recompute; a generator or a shape with it is refused.
  const auto shape = run("schedule --from " + path("a.txt") + " -k 3");
  EXPECT_EQ(shape.code, 2);
  EXPECT_TRUE(has(shape.out, "--from excludes --ranks (the file gives the shape)")) << shape.out;
  EXPECT_EQ(run("schedule --from " + path("a.txt") + " -s gpipe").code, 2);
  const auto policy = run("schedule --from " + path("a.txt") + " --recompute none");
  EXPECT_EQ(policy.code, 1);
  EXPECT_TRUE(has(policy.out, "contradicts the schedule file")) << policy.out;
  EXPECT_EQ(run("schedule --from " + path("missing.csv")).code, 2);
}
