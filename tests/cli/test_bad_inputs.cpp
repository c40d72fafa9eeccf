// The catalogue of bad inputs, run through the real binary: each must end in
// a non-zero exit and one clear message naming the file and line or field (or
// the rank and step), with no stack trace, no core dump and no output file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "schedule/io.hpp"

namespace {

struct Bad {
  std::string name;
  std::vector<std::pair<std::string, std::string>> files;  // name -> contents, written under the test dir
  std::string args;    // "{}" stands for the test dir
  std::string expect;  // substring of the message
  int code = 1;
};

const std::string kMlp = "family: mlp\ninput: 8\nhidden: [8, 8]\noutput: 2\n";
const std::string kT = "family: transformer\nlayers: 2\nd_model: 16\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n";
const std::string kSched2 =
    "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n";

std::vector<Bad> catalogue() {
  const std::string sim = "simulate --hardware a100 -s 1f1b -k 2 -m 2 --model {}/m.yaml --trace {}/out.json";
  const std::string part = "partition --hardware a100 -k 2 --model {}/m.yaml";
  const auto model = [&](std::string name, std::string yaml, std::string expect) {
    return Bad{std::move(name), {{"m.yaml", std::move(yaml)}}, sim, std::move(expect)};
  };
  const auto hw = [&](std::string name, std::string yaml, std::string expect) {
    return Bad{std::move(name), {{"m.yaml", kMlp}, {"hw.yaml", std::move(yaml)}},
               "simulate --hardware {}/hw.yaml -s gpipe -k 2 -m 2 --model {}/m.yaml --trace {}/out.json", std::move(expect)};
  };
  const auto sched = [&](std::string name, std::string file, std::string text, std::string expect) {
    return Bad{std::move(name), {{file, std::move(text)}}, "validate {}/" + file, std::move(expect)};
  };
  const auto trace = [&](std::string name, std::string text, std::string expect) {
    return Bad{std::move(name), {{"t.json", std::move(text)}}, "validate {}/t.json", std::move(expect)};
  };
  return {
      // Model specs.
      model("model_missing_family", "layers: 2\n", "m.yaml:1: field 'family': missing"),
      model("model_unknown_family", "family: capsnet\n", "m.yaml:1: field 'family': unknown family"),
      model("model_missing_size", "family: mlp\ninput: 8\noutput: 2\n", "field 'hidden': missing"),
      model("model_extra_field", kMlp + "dropout: 0.1\n", "m.yaml:5: field 'dropout': unknown"),
      model("model_negative_size", "family: mlp\ninput: -8\nhidden: [8]\noutput: 2\n", "m.yaml:2: field 'input': must be positive"),
      model("model_zero_size", "family: mlp\ninput: 0\nhidden: [8]\noutput: 2\n", "m.yaml:2: field 'input': must be positive"),
      model("model_huge_size", "family: mlp\ninput: 99999999999999999999999\nhidden: [8]\noutput: 2\n", "m.yaml:2: field 'input'"),
      model("model_wrong_type", "family: mlp\ninput: eight\nhidden: [8]\noutput: 2\n", "m.yaml:2: field 'input': expected an integer"),
      model("model_list_expected", "family: mlp\ninput: 8\nhidden: 8\noutput: 2\n", "m.yaml:3: field 'hidden'"),
      model("model_list_of_strings", "family: mlp\ninput: 8\nhidden: [a, b]\noutput: 2\n", "m.yaml:3: field 'hidden'"),
      model("model_empty_list", "family: mlp\ninput: 8\nhidden: []\noutput: 2\n", "m.yaml:3: field 'hidden'"),
      model("model_float_size", "family: mlp\ninput: 8.5\nhidden: [8]\noutput: 2\n", "m.yaml:2: field 'input': expected an integer"),
      model("model_bad_precision", kMlp + "precision: fp8\n", "m.yaml:5: field 'precision'"),
      model("model_heads_mismatch", "family: transformer\nlayers: 2\nd_model: 15\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n",
            "m.yaml:5: field 'heads': must divide d_model"),
      model("model_amoebanet_cells", "family: amoebanet\ncells: 4\nfilters: 8\nimage: 32\nclasses: 10\n",
            "m.yaml:2: field 'cells': must be a multiple of 3"),
      model("model_malformed_yaml", "family: mlp\nhidden: [8\n", "m.yaml:3: malformed YAML"),
      model("model_not_a_mapping", "- 1\n- 2\n", "m.yaml:1: expected a mapping"),
      model("model_empty_file", "", "expected a mapping"),
      model("model_non_utf8", "family: \xff\xfe\n", "m.yaml:1: field 'family'"),
      model("model_tabs", "family: mlp\n\tinput: 8\n", "m.yaml"),
      model("model_truncated", "family: transfor", "m.yaml:1: field 'family': unknown family"),
      model("model_too_many_layers", "family: transformer\nlayers: 100001\nd_model: 16\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n",
            "m.yaml:2: field 'layers': must be at most 100000"),
      model("model_resnet_too_wide", "family: resnet\nimage: 32\nstem_channels: 64\nstages: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nclasses: 10\n",
            "m.yaml:4: field 'stages': 15 stages double the stem's 64 channels"),
      {"model_missing_file", {}, sim, "m.yaml: cannot open"},
      // Hardware specs.
      hw("hw_unknown_preset", "preset: b200\n", "hw.yaml:1: field 'preset': unknown hardware preset"),
      hw("hw_missing_fields", "name: x\n", "field 'device.peak_flops_fp32': missing"),
      hw("hw_negative_memory", "preset: a100\ndevice:\n  memory_gb: -1\n", "hw.yaml:3: field 'device.memory_gb': must be positive"),
      hw("hw_zero_bandwidth", "preset: a100\ntopology:\n  intra: {latency_us: 1, bandwidth_gbps: 0}\n",
         "hw.yaml:3: field 'topology.intra.bandwidth_gbps': must be positive"),
      hw("hw_wrong_type", "preset: a100\ndevice:\n  peak_flops_half: fast\n", "hw.yaml:3: field 'device.peak_flops_half'"),
      hw("hw_extra_field", "preset: a100\ncolor: red\n", "hw.yaml:2: field 'color': unknown"),
      hw("hw_unknown_topology", "preset: a100\ntopology:\n  kind: torus\n", "hw.yaml:3: field 'topology.kind'"),
      hw("hw_efficiency_above_one", "preset: a100\ndevice:\n  efficiency:\n    max: 2\n", "field 'device.efficiency.max'"),
      hw("hw_device_not_mapping", "preset: a100\ndevice: 3\n", "hw.yaml:2: field 'device': expected a mapping"),
      hw("hw_malformed_yaml", "preset: [a100\n", "hw.yaml:2: malformed YAML"),
      {"hw_neither_preset_nor_file", {{"m.yaml", kMlp}}, "simulate --hardware tpu-v9 -s gpipe -k 2 -m 2 --model {}/m.yaml",
       "hardware 'tpu-v9' is neither a preset"},
      // Schedules.
      sched("text_unknown_op", "s.txt", "rank 0: 0F0 0X0\n", "s.txt:1: invalid action '0X0'"),
      sched("text_bad_header_value", "s.txt", "ranks two\nrank 0: 0F0 0B0\n", "s.txt:1: 'two' is not an integer"),
      sched("text_unknown_key", "s.txt", "colour red\nrank 0: 0F0 0B0\n", "s.txt:1: unknown line 'colour'"),
      sched("text_rank_out_of_order", "s.txt", "rank 1: 1F0 1B0\n", "s.txt:1: expected rank 0"),
      sched("text_zero_microbatches", "s.txt", "microbatches 0\nrank 0: 0F0 0B0\n", "micro-batches must be at least 1"),
      sched("text_missing_backward", "s.txt", "rank 0: 0F0 0SEND_F0\nrank 1: 1RECV_F0 1F0 1B0\n", "0F0 has no backward"),
      sched("text_deadlock", "s.txt",
            "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1\n"
            "rank 1: 1RECV_F1 1F1 1RECV_F0 1F0 1B0 1SEND_B0 1B1 1SEND_B1\n",
            "rank 0, step 2: deadlock"),
      sched("text_bad_partition", "s.txt", "partition 0:3 5:6\n" + kSched2, "partition of stage 1 is 5:6"),
      sched("csv_unknown_torch_action", "s.csv", "0F0,0OVERLAP_F_B0\n", "s.csv:1: column 2: invalid action '0OVERLAP_F_B0'"),
      sched("csv_stages_do_not_divide", "s.csv", "0F0,0B0,1F0,1B0,2F0,2B0\n1F0\n", "3 stages do not divide evenly over 2 ranks"),
      sched("csv_truncated_cell", "s.csv", "0F0,0SEND_\n", "s.csv:1: column 2"),
      sched("json_truncated", "s.json", "{\"format\": \"pipetwin-schedule\", \"ranks\": ", "s.json: not valid JSON"),
      sched("json_wrong_type", "s.json",
            "{\"format\":\"pipetwin-schedule\",\"schedule\":\"x\",\"ranks\":\"2\",\"stages_per_rank\":1,\"microbatches\":1}",
            "s.json: field 'ranks' must be an integer"),
      sched("json_missing_field", "s.json", "{\"format\":\"pipetwin-schedule\",\"schedule\":\"x\"}", "s.json: missing field 'ranks'"),
      sched("json_wrong_format", "s.json", "{\"format\":\"other\"}", "s.json: field 'format'"),
      sched("json_number_past_a_double", "s.json", "{\"format\":\"pipetwin-schedule\",\"ranks\":404e0404}", "s.json: not valid JSON"),
      sched("csv_stage_past_the_limit", "s.csv", "0F01,2B0,777777777F01\n", "s.csv: 1 ranks x 777777778 stages per rank is more than"),
      sched("text_stages_per_rank_past_the_limit", "s.txt", "stages_per_rank 2000000000\n" + kSched2,
            "s.txt: 2 ranks x 2000000000 stages per rank is more than"),
      sched("empty_schedule", "s.txt", "\n\n", "s.txt: empty file"),
      // Traces.
      trace("trace_truncated", "{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"0F0\"", "t.json: not valid JSON"),
      // Command lines.
      {"cli_zero_ranks", {}, "schedule -s gpipe -k 0 -m 4", "--ranks", 2},
      {"cli_zero_microbatches", {}, "schedule -s gpipe -k 2 -m 0", "--microbatches", 2},
      {"cli_unknown_schedule", {}, "schedule -s chimera -k 2 -m 4", "gpipe", 2},
      {"cli_unknown_flag", {}, "schedule -s gpipe -k 2 -m 4 --colour red", "--colour", 2},
      {"cli_no_subcommand", {}, "", "A subcommand is required", 2},
      {"cli_virtual_for_gpipe", {}, "schedule -s gpipe -k 2 -m 4 -v 2", "--virtual 2 needs interleaved-1f1b"},
      {"cli_batch_not_divisible", {{"m.yaml", kT}}, "simulate --hardware a100 -s gpipe -k 2 -m 4 --batch 6 --model {}/m.yaml",
       "--batch 6 does not split"},
      {"cli_more_stages_than_layers", {{"m.yaml", kT}}, "simulate --hardware a100 -s gpipe -k 9 -m 4 --model {}/m.yaml",
       "a stage needs at least one layer"},
      {"cli_out_of_memory", {{"m.yaml", kT}, {"hw.yaml", "preset: a100\ndevice:\n  memory_gb: 0.000001\n"}},
       "simulate --hardware {}/hw.yaml -s gpipe -k 2 -m 4 --model {}/m.yaml --trace {}/out.json", "fits in memory"},
      {"cli_sweep_foreign_csv", {{"m.yaml", kT}, {"out.json", "a,b\n"}},
       "sweep --hardware a100 -s gpipe -k 1 -m 1 --model {}/m.yaml --out {}/out.json", "header differs"},
      {"cli_partition_file_too_short", {{"m.yaml", kT}, {"p.txt", "0:1 1:2\n"}},
       "simulate --hardware a100 -s gpipe -k 2 -m 2 --model {}/m.yaml --partition {}/p.txt", "but transformer has 4 layers"},
      {"cli_out_in_missing_dir", {}, "schedule -s gpipe -k 2 -m 2 --out {}/no/dir/s.txt", "cannot open"},
  };
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

class BadInput : public ::testing::TestWithParam<Bad> {};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

}  // namespace

TEST_P(BadInput, ClearErrorNonZeroExitNoOutput) {
  const auto& b = GetParam();
  const auto dir = std::filesystem::temp_directory_path() / ("pipetwin_bad_" + std::to_string(::getpid()) + "_" + b.name);
  std::filesystem::create_directories(dir);
  for (const auto& [name, text] : b.files) pipetwin::schedule::write_file_atomic((dir / name).string(), text);
  const bool preexisting_out = std::filesystem::exists(dir / "out.json");
  const std::string cmd = std::string(PIPETWIN_BINARY) + " " + replace_all(b.args, "{}", dir.string()) + " 2>&1";
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::array<char, 4096> buf{};
  while (const auto n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << b.name << " did not exit normally (signal?)\n" << out;
  EXPECT_EQ(WEXITSTATUS(status), b.code) << b.name << "\n" << out;
  EXPECT_NE(out.find(b.expect), std::string::npos) << b.name << "\n" << out;
  for (const char* crash : {"terminate called", "Aborted", "core dumped", "Segmentation", "internal error", "what():"}) {
    EXPECT_EQ(out.find(crash), std::string::npos) << b.name << "\n" << out;
  }
  if (b.code == 1) {
    EXPECT_EQ(out.rfind("pipetwin: error: ", 0), 0u) << b.name << ": one message, first line\n" << out;
  }
  if (!preexisting_out) {
    EXPECT_FALSE(std::filesystem::exists(dir / "out.json")) << b.name << " left an output file";
  }
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << "temporary left behind: " << entry.path();
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInput, ::testing::ValuesIn(catalogue()),
                         [](const auto& info) { return info.param.name; });

TEST(BadInputCatalogue, HoldsAtLeastFifty) { EXPECT_GE(catalogue().size(), 50u); }
