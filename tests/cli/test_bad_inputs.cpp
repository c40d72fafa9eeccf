// The catalogue of bad inputs, run through the real binary: each must end in
// a non-zero exit and one clear message naming the file and line or field (or
// the rank and step), with no stack trace, no core dump and no output file.
//
// Every case runs in a folder of its own holding only its input files; after
// the command that folder must hold exactly those files, unchanged (no output,
// no temporary). Inputs that must be real (traces, calibrated hardware files)
// are made once by the binary itself (simulate --trace, calibrate) into a
// shared fixture folder and edited by the cases. The commands run several at
// a time (each start loads LibTorch, ~0.5 s); the tests then check each result.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "schedule/io.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Makes a file's contents from the fixtures (called once the fixtures exist).
using Make = std::function<std::string()>;

struct Bad {
  std::string name;
  std::vector<std::pair<std::string, std::string>> files;  // name -> contents, written under the test dir
  std::string args;    // "{}" stands for the test dir, "{fix}" for the fixture dir
  std::string expect;  // substring of the message (stderr)
  int code = 1;
  std::vector<std::pair<std::string, Make>> made = {};  // name -> contents made from the fixtures
  // The message is deliberately followed by more lines: validate's step x rank
  // grid of a schedule that does not validate (docs/schedule-ir.md).
  bool grid = false;
};

const std::string kMlp = "family: mlp\ninput: 8\nhidden: [8, 8]\noutput: 2\n";
const std::string kT = "family: transformer\nlayers: 2\nd_model: 16\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n";
const std::string kMoeBase =
    "family: moe\nlayers: 2\nhidden: 16\nheads: 2\nseq_len: 4\nvocab: 10\nexperts: 4\nexpert_ffn_hidden: 8\n";
const std::string kMoe = kMoeBase + "top_k: 2\n";
const std::string kSweepHeader =
    "schedule,recompute,ranks,virtual,microbatches,batch,status,step_time_s,throughput_samples_per_s,bubble_fraction,"
    "max_stage_memory_gb,engine,reason,tensor,data\n";
// A part of a plan (pipetwin plan --shard I/N -o), its inputs named `inputs`,
// of `enumerated` candidates (default: N, one per shard), holding a row for
// each of its candidates (but the last when it is `short_by_one`).
std::string plan_part(const std::string& inputs, int shard, int shards, int enumerated = 0, bool short_by_one = false) {
  const int total = enumerated > 0 ? enumerated : shards;
  std::string text = "# pipetwin plan inputs " + inputs + ": tiny on a100\n# shard " + std::to_string(shard) + "/" +
                     std::to_string(shards) + " of " + std::to_string(total) + " candidates\n" +
                     "index,schedule,tensor,pipeline,data,virtual,microbatches,microbatch_size,recompute,"
                     "sequence_parallel,zero1,status,engine,step_time_s,throughput_samples_per_s,tokens_per_s,"
                     "tflops_per_gpu,mfu,bubble_fraction,tp_collectives_s,dp_exposed_s,memory_headroom_gb,reason\n";
  std::vector<int> mine;
  for (int i = shard; i < total; i += shards) mine.push_back(i);
  if (short_by_one) mine.pop_back();
  for (const int i : mine) text += std::to_string(i) + ",1f1b,1,1,1,1,1,1,none,0,0,ok,fast,1,1,0,0,0,0,0,0,1,\n";
  return text;
}

const std::string kSched2 =
    "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0\nrank 1: 1RECV_F0 1F0 1B0 1SEND_B0\n";


// ---- fixtures: real files made by the binary --------------------------------

const std::string kMlpSmall = std::string(PIPETWIN_EXAMPLES_DIR) + "/mlp-small.yaml";

struct Run {
  int status = -1;
  std::string out, err;
};

// Runs the binary with `args` (already expanded); stderr through a file.
Run run_binary(const std::string& args, const fs::path& err_file) {
  const std::string cmd = std::string(PIPETWIN_BINARY) + " " + args + " 2>" + err_file.string();
  Run r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (const auto n = std::fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  r.status = ::pclose(pipe);
  r.err = pipetwin::schedule::read_file(err_file.string());
  fs::remove(err_file);
  return r;
}

const fs::path& fixture_dir() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("pipetwin_bad_fixtures_" + std::to_string(::getpid()));
    fs::create_directories(d);
    const std::string kT = "family: transformer\nlayers: 2\nd_model: 16\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n";
    pipetwin::schedule::write_file_atomic((d / "t.yaml").string(), kT);
    const std::string mlp = " --hardware cpu -k 2 --model " + kMlpSmall;
    const std::vector<std::string> sims{
        "simulate" + mlp + " -s 1f1b -m 2 --batch 4 --trace " + (d / "p.json").string(),
        "simulate" + mlp + " -s 1f1b -m 4 --batch 8 --trace " + (d / "p4.json").string(),
        "simulate" + mlp + " -s gpipe -m 2 --batch 4 --trace " + (d / "pg.json").string(),
        "simulate --hardware cpu -k 2 -s 1f1b -m 2 --model " + (d / "t.yaml").string() + " --trace " + (d / "pt.json").string(),
        "simulate --hardware a100 -k 2 -s 1f1b -m 2 -t 2 -d 2 --model " + (d / "t.yaml").string() + " --trace " +
            (d / "pd.json").string(),
        "simulate --hardware cpu -k 2 -s 1f1b -m 2 -d 2 --model " + (d / "t.yaml").string() + " --trace " +
            (d / "pdd.json").string(),
    };
    std::vector<std::thread> threads;
    std::vector<Run> runs(sims.size());
    for (std::size_t i = 0; i < sims.size(); ++i) {
      threads.emplace_back([&, i] { runs[i] = run_binary(sims[i], d / ("err" + std::to_string(i))); });
    }
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < sims.size(); ++i) {
      if (runs[i].status != 0) throw std::runtime_error("fixture `pipetwin " + sims[i] + "` failed: " + runs[i].err);
    }
    const std::string cal = "calibrate " + (d / "p.json").string() + " " + (d / "p4.json").string() +
                            " --hardware cpu --out " + (d / "cal.yaml").string();
    const Run c = run_binary(cal, d / "err");
    if (c.status != 0) throw std::runtime_error("fixture `pipetwin " + cal + "` failed: " + c.err);
    return d;
  }();
  return dir;
}

std::string fixture(const std::string& name) { return pipetwin::schedule::read_file((fixture_dir() / name).string()); }

// `text` with the first `from` replaced by `to`; `from` must be there.
std::string replace_first(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("fixture edit: '" + from + "' not found");
  return text.replace(at, from.size(), to);
}

// `text` with its first line that starts with `start` replaced by `line`.
std::string replace_line(const std::string& text, const std::string& start, const std::string& line) {
  const auto at = text.rfind("\n" + start) != std::string::npos ? text.find("\n" + start) + 1 : std::string::npos;
  if (at == std::string::npos) throw std::runtime_error("fixture edit: no line starting with '" + start + "'");
  const auto end = text.find('\n', at);
  return text.substr(0, at) + line + (end == std::string::npos ? "" : text.substr(end));
}

// A fixture trace, edited.
Make edited(const std::string& name, std::function<void(json&)> edit) {
  return [name, edit] {
    json j = json::parse(fixture(name));
    edit(j);
    return j.dump();
  };
}

// The first "ph":"X" event named `action`.
json& event(json& trace, const std::string& action) {
  for (auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") == "X" && e.value("name", "") == action) return e;
  }
  throw std::runtime_error("fixture edit: no event " + action);
}

// What `pipetwin run --trace` records beyond a simulation's otherData.
void as_measured(json& j, int threads = 1) {
  j["otherData"]["producer"] = "pipetwin run";
  j["otherData"]["measured"]["ranks"] = json::array();
  for (int r = 0; r < j["otherData"]["ranks"].get<int>(); ++r) {
    j["otherData"]["measured"]["ranks"].push_back({{"rank", r}, {"threads", threads}, {"clock_uncertainty_s", 1e-6}});
  }
}

void drop_rank(json& j, int rank) {
  auto& events = j["traceEvents"];
  events.erase(std::remove_if(events.begin(), events.end(), [&](const json& e) { return e.value("pid", -1) == rank; }),
               events.end());
}

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
  const auto cmp = [&](std::string name, Make measured, std::string expect) {
    return Bad{std::move(name), {}, "compare {fix}/p.json {}/m.json", std::move(expect), 1,
               {{"m.json", std::move(measured)}}};
  };
  const auto cal = [&](std::string name, Make trace, std::string expect) {
    return Bad{std::move(name), {}, "calibrate {}/t.json --hardware cpu --out {}/out.yaml", std::move(expect), 1,
               {{"t.json", std::move(trace)}}};
  };
  const std::string calhw_args =
      "simulate --hardware {}/cal.yaml -s 1f1b -k 2 -m 2 --batch 4 --model " + kMlpSmall + " --trace {}/out.json";
  const auto calhw = [&](std::string name, std::string from, std::string to, std::string expect) {
    return Bad{std::move(name), {}, calhw_args, std::move(expect), 1,
               {{"cal.yaml", [from, to] { return replace_line(fixture("cal.yaml"), from, to); }}}};
  };
  const auto trace = [&](std::string name, std::string text, std::string expect) {
    return Bad{std::move(name), {{"t.json", std::move(text)}}, "validate {}/t.json", std::move(expect)};
  };
  std::vector<Bad> all{
      // Model specs.
      model("model_missing_family", "layers: 2\n", "m.yaml:1: field 'family': missing"),
      model("model_duplicate_key", kMlp + "input: 9\n", "m.yaml:5: field 'input': given twice (first on line 2)"),
      model("model_name_with_a_line_break", "name: \"a\\nb\"\n" + kMlp, "m.yaml:1: field 'name': holds the control character \\x0a"),
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
      model("model_grad_precision_narrower", kMlp + "grad_precision: bf16\n",
            "m.yaml:5: field 'grad_precision': must be fp32 or the weights' precision (fp32), got bf16"),
      model("model_heads_mismatch", "family: transformer\nlayers: 2\nd_model: 15\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n",
            "m.yaml:5: field 'heads': must divide d_model"),
      model("model_amoebanet_cells", "family: amoebanet\ncells: 4\nfilters: 8\nimage: 32\nclasses: 10\n",
            "m.yaml:2: field 'cells': must be a multiple of 3"),
      model("model_malformed_yaml", "family: mlp\nhidden: [8\n", "m.yaml:3: malformed YAML"),
      model("model_not_a_mapping", "- 1\n- 2\n", "m.yaml:1: expected a mapping"),
      model("model_empty_file", "", "expected a mapping"),
      model("model_non_utf8", "family: \xff\xfe\n", "m.yaml:1: not UTF-8 text (byte \\xff at column 9)"),
      model("model_tabs", "family: mlp\n\tinput: 8\n", "m.yaml"),
      model("model_truncated", "family: transfor", "m.yaml:1: field 'family': unknown family"),
      model("model_too_many_layers", "family: transformer\nlayers: 100001\nd_model: 16\nd_ff: 32\nheads: 2\nseq_len: 4\nvocab: 10\n",
            "m.yaml:2: field 'layers': must be at most 100000"),
      model("model_resnet_too_wide", "family: resnet\nimage: 32\nstem_channels: 64\nstages: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nclasses: 10\n",
            "m.yaml:4: field 'stages': 15 stages double the stem's 64 channels"),
      {"model_missing_file", {}, sim, "m.yaml: cannot open"},
      // Hardware specs.
      hw("hw_unknown_preset", "preset: b200\n", "hw.yaml:1: field 'preset': unknown hardware preset"),
      hw("hw_preset_not_a_string", "preset: [v100]\n", "error: {}/hw.yaml:1: field 'preset': expected a string"),
      hw("hw_effective_cores_past_the_host", "preset: cpu\ntopology:\n  effective_cores: 50\n",
         "hw.yaml:3: field 'topology.effective_cores': is 50, more than the host's 2 cores"),
      hw("hw_oversubscribed_cores_past_the_host", "preset: cpu\ntopology:\n  oversubscribed_cores: 2.5\n",
         "hw.yaml:3: field 'topology.oversubscribed_cores': is 2.5, more than the host's 2 cores"),
      hw("hw_duplicate_nested_key", "preset: a100\ndevice:\n  memory_gb: 32\n  memory_gb: 1\n",
         "hw.yaml:4: field 'device.memory_gb': given twice (first on line 3)"),
      hw("hw_missing_fields", "name: x\n", "field 'device.peak_flops_fp32': missing"),
      hw("hw_negative_memory", "preset: a100\ndevice:\n  memory_gb: -1\n", "hw.yaml:3: field 'device.memory_gb': must be positive"),
      hw("hw_zero_bandwidth", "preset: a100\ntopology:\n  intra: {latency_us: 1, bandwidth_gbps: 0}\n",
         "hw.yaml:3: field 'topology.intra.bandwidth_gbps': must be positive"),
      hw("hw_wrong_type", "preset: a100\ndevice:\n  peak_flops_half: fast\n", "hw.yaml:3: field 'device.peak_flops_half'"),
      hw("hw_extra_field", "preset: a100\ncolor: red\n", "hw.yaml:2: field 'color': unknown"),
      hw("hw_unknown_topology", "preset: a100\ntopology:\n  kind: torus\n", "hw.yaml:3: field 'topology.kind'"),
      hw("hw_efficiency_above_one", "preset: a100\ndevice:\n  efficiency:\n    max: 2\n", "field 'device.efficiency.max'"),
      hw("hw_memory_efficiency_above_one", "preset: a100\ndevice:\n  memory_efficiency: 1.5\n",
         "field 'device.memory_efficiency'"),
      hw("hw_attention_lengths_decreasing",
         "preset: h100\ndevice:\n  attention:\n    forward: [[512, 300]]\n    forward_causal: [[1024, 200], [512, 250]]\n"
         "    backward: [[512, 200]]\n",
         "hw.yaml:5: field 'device.attention.forward_causal': the points' sequence lengths must increase"),
      hw("hw_attention_missing_backward", "preset: h100\ndevice:\n  attention:\n    forward: [[512, 300]]\n    forward_causal: [[512, 200]]\n",
         "field 'device.attention.backward': missing"),
      hw("hw_device_not_mapping", "preset: a100\ndevice: 3\n", "hw.yaml:2: field 'device': expected a mapping"),
      hw("hw_malformed_yaml", "preset: [a100\n", "hw.yaml:2: malformed YAML"),
      hw("hw_oversubscription_below_one", "preset: dgx-h100\ntopology:\n  oversubscription: 0.5\n",
         "hw.yaml:3: field 'topology.oversubscription': is 0.5: must be at least 1"),
      hw("hw_nics_not_dividing_gpus", "preset: dgx-a100-80gb\ntopology:\n  nics_per_host: 3\n",
         "hw.yaml:3: field 'topology.nics_per_host': 3 NICs for 8 GPUs per node"),
      hw("hw_unknown_network", "preset: selene\ntopology:\n  network: torus\n",
         "hw.yaml:3: field 'topology.network': unknown network 'torus' (valid: fat-tree, rail)"),
      hw("hw_cluster_missing_inter", "preset: a100\ntopology:\n  kind: cluster\n", "hw.yaml:3: field 'topology.inter': missing"),
      {"calibrate_fit_attention_without_runs", {{"t.json", "{}"}}, "calibrate {}/t.json --fit-attention --out {}/c.yaml",
       "--fit-attention fits with --runs: give it whole runs"},
      {"hw_neither_preset_nor_file", {{"m.yaml", kMlp}}, "simulate --hardware tpu-v9 -s gpipe -k 2 -m 2 --model {}/m.yaml",
       "hardware 'tpu-v9' is neither a preset"},
      {"grad_bucket_first_without_buckets", {{"m.yaml", kMlp}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --model {}/m.yaml --grad-bucket-first-mb 1",
       "--grad-bucket-first-mb sizes the first of the gradient buckets: give --grad-bucket-mb too"},
      // Own cost tables (simulate --costs).
      {"costs_missing_backward", {{"c.yaml", "stages:\n  - {forward_s: 0.01}\n"}}, "simulate --costs {}/c.yaml -s 1f1b -k 2 -m 2",
       "c.yaml:2: field 'stages[0].backward_s': missing"},
      {"costs_wrong_stage_count", {{"c.yaml", "stages:\n  - {forward_s: 1, backward_s: 2}\n  - {forward_s: 1, backward_s: 2}\n"}},
       "simulate --costs {}/c.yaml -s 1f1b -k 4 -m 4", "c.yaml: 2 stages, but the schedule has 4"},
      {"costs_csv_bad_number", {{"c.csv", "forward_s,backward_s\n0.01,slow\n"}}, "simulate --costs {}/c.csv -s gpipe -k 1 -m 2",
       "c.csv:2: field 'stages[0].backward_s': expected a number, got 'slow'"},
      {"costs_csv_ragged_row", {{"c.csv", "forward_s,backward_s\n0.01\n"}}, "simulate --costs {}/c.csv -s gpipe -k 1 -m 2",
       "c.csv:2: 1 columns, but the header has 2"},
      {"costs_zb_without_split", {{"c.yaml", "stages:\n  - {forward_s: 1, backward_s: 2}\n"}},
       "simulate --costs {}/c.yaml -s zb-h1 -k 2 -m 4", "splits the backward into I and W: give input_grad_s and weight_grad_s"},
      {"costs_with_data_parallel", {{"c.yaml", "stages:\n  - {forward_s: 1, backward_s: 2}\n"}},
       "simulate --costs {}/c.yaml -s 1f1b -k 2 -m 4 -d 2", "--costs: a cost table times one pipeline"},
      {"costs_not_a_mapping", {{"c.yaml", "- 1\n- 2\n"}}, "simulate --costs {}/c.yaml -s 1f1b -k 2 -m 4",
       "c.yaml: a cost table is a mapping with a 'stages' list"},
      {"costs_per_sample_without_slope", {{"c.yaml", "stages:\n  - {forward_s: {fixed_s: 0.01}, backward_s: 0.02}\n"}},
       "simulate --costs {}/c.yaml -s 1f1b -k 1 -m 2", "c.yaml:2: field 'stages[0].forward_s.per_sample_s': missing"},
      {"costs_batch_without_per_sample_times", {{"c.yaml", "stages:\n  - {forward_s: 0.01, backward_s: 0.02}\n"}},
       "simulate --costs {}/c.yaml -s 1f1b -k 2 -m 4 --batch 16",
       "c.yaml: its times are for micro-batches of 1 samples (samples_per_microbatch), not 4"},
      // torch.profiler traces (calibrate and compare --costs).
      {"kineto_rank_missing", {{"rank0.json", "{\"schemaVersion\": 1, \"distributedInfo\": {\"rank\": 0, \"world_size\": 2}, \"host_name\": \"h\", \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"PP:0F0\", \"ts\": 1, \"dur\": 1}, {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"PP:0B0\", \"ts\": 3, \"dur\": 1}]}"}}, "calibrate {} --out {}/c.yaml",
       "no trace of rank 1 of the 2 (distributedInfo.world_size)"},
      {"kineto_beside_pipetwin_trace", {{"rank0.json", "{\"schemaVersion\": 1, \"distributedInfo\": {\"rank\": 0, \"world_size\": 2}, \"host_name\": \"h\", \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"PP:0F0\", \"ts\": 1, \"dur\": 1}, {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"PP:0B0\", \"ts\": 3, \"dur\": 1}]}"}}, "calibrate {} {fix}/p.json --out {}/c.yaml",
       "p.json: one of pipetwin's traces, given with torch.profiler traces"},
      {"kineto_not_json", {{"rank0.json", "{\"schemaVersion\": 1, \"traceEvents\": ["}}, "calibrate {} --out {}/c.yaml",
       "rank0.json: not a JSON trace"},
      {"kineto_without_rank", {{"rank0.json", "{\"schemaVersion\": 1, \"traceEvents\": []}"}}, "calibrate {} --out {}/c.yaml",
       "rank0.json: no distributedInfo.rank and world_size"},
      {"compare_costs_without_run", {{"c.yaml", "stages:\n  - {forward_s: 0.01, backward_s: 0.02}\n"}},
       "compare --costs {}/c.yaml", "run is required", 2},
      {"simulate_without_model_or_costs", {}, "simulate --hardware a100 -s 1f1b -k 2 -m 4",
       "simulate needs --model and --hardware, or --costs FILE"},
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
      sched("csv_overlap_unclosed", "s.csv", "0F0,(0F1;0B0\n", "s.csv:1: column 2: invalid action '(0F1;0B0': expected (<action>;<action>)OVERLAP_F_B"),
      sched("csv_overlap_empty_sub_action", "s.csv", "0F0,(0F1;;0B0)OVERLAP_F_B\n",
            "s.csv:1: column 2: invalid action '': expected <stage><op>[<micro-batch>], e.g. 2F0 or 3SEND_F1, in "
            "'(0F1;;0B0)OVERLAP_F_B'"),
      sched("csv_overlap_empty_group", "s.csv", "0F0,()OVERLAP_F_B\n", "s.csv:1: column 2: invalid action '': expected "
            "<stage><op>[<micro-batch>], e.g. 2F0 or 3SEND_F1, in '()OVERLAP_F_B'"),
      sched("csv_overlap_of_one_action", "s.csv", "0F0,(0F1)OVERLAP_F_B\n",
            "s.csv:1: column 2: OVERLAP_F_B '(0F1)OVERLAP_F_B' holds 1 action, expected two or more"),
      sched("csv_overlap_trailing_suffix", "s.csv", "0F0,(0F1;0B0)OVERLAP_F_BX\n",
            "s.csv:1: column 2: invalid action '(0F1;0B0)OVERLAP_F_BX': expected (<action>;<action>)OVERLAP_F_B"),
      sched("csv_overlap_of_a_transfer", "s.csv", "0F0,(0F1;0SEND_F1)OVERLAP_F_B\n",
            "s.csv:1: column 2: OVERLAP_F_B holds 0SEND_F1: its sub-actions are forwards and backwards"),
      sched("csv_stages_do_not_divide", "s.csv", "0F0,0B0,1F0,1B0,2F0,2B0\n1F0\n", "3 stages do not divide evenly over 2 ranks"),
      sched("csv_truncated_cell", "s.csv", "0F0,0SEND_\n", "s.csv:1: column 2"),
      sched("json_truncated", "s.json", "{\"format\": \"pipetwin-schedule\", \"ranks\": ", "s.json: not valid JSON"),
      sched("json_wrong_type", "s.json",
            "{\"format\":\"pipetwin-schedule\",\"schedule\":\"x\",\"ranks\":\"2\",\"stages_per_rank\":1,\"microbatches\":1}",
            "s.json: field 'ranks' must be an integer"),
      sched("json_missing_field", "s.json", "{\"format\":\"pipetwin-schedule\",\"schedule\":\"x\"}", "s.json: missing field 'ranks'"),
      sched("json_wrong_format", "s.json", "{\"format\":\"other\"}", "s.json: field 'format'"),
      sched("json_later_version", "s.json", "{\"format\":\"pipetwin-schedule\",\"version\":2}",
            "s.json: field 'version' is 2: this pipetwin reads version 1"),
      sched("text_negative_weight_versions", "s.txt", "weight_versions 1 -1\n" + kSched2,
            "s.txt: invalid schedule: weight_versions of stage 1 is -1"),
      sched("text_shape_error_names_the_file", "s.txt", "ranks 2\nstage_to_rank 0\n" + kSched2,
            "s.txt: invalid schedule: stage_to_rank maps 1 stages, expected 2"),
      sched("json_number_past_a_double", "s.json", "{\"format\":\"pipetwin-schedule\",\"ranks\":404e0404}", "s.json: not valid JSON"),
      sched("csv_stage_past_the_limit", "s.csv", "0F01,2B0,777777777F01\n", "s.csv: 1 ranks x 777777778 stages per rank is more than"),
      sched("text_stages_per_rank_past_the_limit", "s.txt", "stages_per_rank 2000000000\n" + kSched2,
            "s.txt: 2 ranks x 2000000000 stages per rank is more than"),
      sched("empty_schedule", "s.txt", "\n\n", "s.txt: empty file"),
      sched("text_non_utf8_schedule_name", "s.txt", "schedule g\xffp\nrank 0: 0F0 0B0\n",
            "s.txt:1: not UTF-8 text (byte \\xff at column 11)"),
      sched("csv_non_utf8", "s.csv", "0F0,\xc3\x28\n", "s.csv:1: not UTF-8 text (byte \\xc3 at column 5)"),
      // Traces.
      trace("trace_truncated", "{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"0F0\"", "t.json: not valid JSON"),
      // Command lines.
      {"cli_zero_ranks", {}, "schedule -s gpipe -k 0 -m 4", "--ranks", 2},
      {"cli_zero_microbatches", {}, "schedule -s gpipe -k 2 -m 0", "--microbatches", 2},
      {"cli_unknown_schedule", {}, "schedule -s chimera -k 2 -m 4", "gpipe", 2},
      // Sizes checked before anything is built (they took minutes and gigabytes).
      {"cli_microbatches_past_the_limit", {}, "schedule -s 1f1b -k 2 -m 1000000000",
       "2 stages x 1000000000 micro-batches is more than the 10000000 (stage, micro-batch) pairs"},
      {"simulate_more_stages_than_layers_at_once", {}, "simulate --hardware cpu -s 1f1b -k 1000000 -m 4 --model " + kMlpSmall,
       "cannot cut mlp-small (7 layers) into 1000000 stages"},
      {"cli_unknown_flag", {}, "schedule -s gpipe -k 2 -m 4 --colour red", "--colour", 2},
      {"cli_arguments_not_expected", {}, "info --model " + kMlpSmall, "were not expected: ", 2},
      {"probe_no_rounds", {}, "probe --rounds 0", "probe: --rounds must be at least 1, got 0"},
      {"probe_negative_threads", {}, "probe --threads -2", "probe: --threads must be at least 1, got -2"},
      {"probe_phase_too_long", {}, "probe --seconds 60", "probe: --seconds must be in (0, 10], got 60"},
      {"probe_json_in_a_missing_folder", {}, "probe --rounds 1 --seconds 0.01 --quiet --json /nonexistent/probe.json",
       "/nonexistent/probe.json: cannot open"},
      {"cli_no_subcommand", {}, "", "A subcommand is required", 2},
      {"cli_unknown_command", {}, "frobnicate --help", "unknown command 'frobnicate' (valid: schedule, validate,", 2},
      {"cli_run_learning_rate_not_finite", {}, "run -s 1f1b -k 1 -m 2 --steps 1 --lr inf --model " + kMlpSmall,
       "--lr: must be a finite number, got inf", 2},
      {"cli_standard_output_full", {}, "schedule -s 1f1b -k 2 -m 4 >/dev/full", "cannot write to standard output"},
      {"model_is_a_folder", {}, "simulate --hardware cpu -s 1f1b -k 2 -m 2 --model {}", "{}: is a folder, not a file"},
      {"cli_virtual_for_gpipe", {}, "schedule -s gpipe -k 2 -m 4 -v 2", "--virtual 2 needs interleaved-1f1b"},
      {"cli_microbench_repeats_without_microbench", {}, "calibrate {fix}/p.json --microbench-repeats 3 --out {}/o.yaml",
       "--microbench-repeats requires --microbench", 2},
      {"cli_microbench_repeats_zero", {}, "calibrate --microbench --microbench-repeats 0 --model " + kMlpSmall + " --out {}/o.yaml",
       "--microbench-repeats", 2},
      {"cli_virtual_3_for_zb_v", {}, "schedule -s zb-v -k 2 -m 4 -v 3",
       "schedule zb-v: places exactly 2 stages per rank; --virtual 3 is not possible (leave --virtual out, or give 2)"},
      // A schedule file in place of a generator: what it fixes cannot be said otherwise.
      {"simulate_schedule_file_other_ranks", {{"s.txt", kSched2}}, "simulate --hardware cpu -s {}/s.txt -k 4 --model " + kMlpSmall,
       "--ranks 4 contradicts the schedule file {}/s.txt, which has 2 ranks"},
      {"simulate_schedule_file_other_microbatches", {{"s.txt", kSched2}}, "simulate --hardware cpu -s {}/s.txt -m 8 --model " + kMlpSmall,
       "--microbatches 8 contradicts the schedule file {}/s.txt, which has 1 micro-batches"},
      {"simulate_schedule_file_and_its_partition", {{"s.txt", "partition 0:3 3:7\n" + kSched2}},
       "simulate --hardware cpu -s {}/s.txt --partition uniform --model " + kMlpSmall,
       "--partition uniform contradicts the schedule file {}/s.txt, which holds its own partition line"},
      {"simulate_schedule_file_recompute_contradicts", {{"s.txt", "recompute full\n" + kSched2}},
       "simulate --hardware cpu -s {}/s.txt --recompute none --model " + kMlpSmall,
       "--recompute none contradicts the schedule file {}/s.txt, whose recompute is full"},
      {"simulate_schedule_file_deadlocks", {{"s.txt",
        "rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0F1 0SEND_F1 0RECV_B1 0B1\n"
        "rank 1: 1RECV_F1 1F1 1RECV_F0 1F0 1B0 1SEND_B0 1B1 1SEND_B1\n"}},
       "simulate --hardware cpu -s {}/s.txt --model " + kMlpSmall, "{}/s.txt: invalid schedule: rank 0, step 2: deadlock"},
      {"simulate_schedule_file_more_stages_than_layers",
       {{"m.yaml", kT}, {"s.csv", "0F0,0B0,2F0,2B0,4F0,4B0\n1F0,1B0,3F0,3B0,5F0,5B0\n"}},
       "simulate --hardware cpu -s {}/s.csv --model {}/m.yaml", "(4 layers) into 6 stages: a stage needs at least one layer"},
      {"run_grad_precision", {{"m.yaml", kMlp + "precision: bf16\ngrad_precision: fp32\n"}},
       "run -s gpipe -k 2 -m 2 --steps 1 --model {}/m.yaml",
       "run: mlp has grad_precision fp32, but the executor keeps each gradient in its weight's precision (bf16)"},
      {"run_schedule_file_other_ranks", {{"s.txt", kSched2}}, "run -s {}/s.txt -k 3 --steps 1 --model " + kMlpSmall,
       "--ranks 3 contradicts the schedule file {}/s.txt, which has 2 ranks"},
      {"cli_generator_without_microbatches", {}, "simulate --hardware cpu -s 1f1b -k 2 --model " + kMlpSmall,
       "--microbatches (with a schedule generator) is required", 2},
      {"cli_schedule_neither_generator_nor_file", {}, "simulate --hardware cpu -s nosuch.csv -k 2 -m 2 --model " + kMlpSmall,
       "'nosuch.csv' is neither a schedule generator (gpipe, 1f1b, interleaved-1f1b, interleaved-zb, looped-bfs, zb-h1, zb-h2, zb-v, dualpipe-v, v-half, v-min, pipedream, combined-1f1b) nor a schedule file", 2},
      {"cli_combined_1f1b_without_virtual", {}, "simulate --hardware cpu -s combined-1f1b -k 2 -m 4 --model " + kMlpSmall,
       "schedule combined-1f1b: needs --virtual V >= 2 (stages per rank) with more than one rank"},
      {"cli_batch_not_divisible", {{"m.yaml", kT}}, "simulate --hardware a100 -s gpipe -k 2 -m 4 --batch 6 --model {}/m.yaml",
       "--batch 6 does not split"},
      {"cli_more_stages_than_layers", {{"m.yaml", kT}}, "simulate --hardware a100 -s gpipe -k 9 -m 4 --model {}/m.yaml",
       "a stage needs at least one layer"},
      {"cli_out_of_memory", {{"m.yaml", kT}, {"hw.yaml", "preset: a100\ndevice:\n  memory_gb: 0.000001\n"}},
       "simulate --hardware {}/hw.yaml -s gpipe -k 2 -m 4 --model {}/m.yaml --trace {}/out.json", "fits in memory"},
      {"cli_sweep_foreign_csv", {{"m.yaml", kT}, {"out.json", "a,b\n"}},
       "sweep --hardware a100 -s gpipe -k 1 -m 1 --model {}/m.yaml --out {}/out.json", "header differs"},
      // Rows of another sweep (other inputs, or none recorded) are refused, not resumed.
      {"cli_sweep_rows_of_other_inputs",
       {{"m.yaml", kT}, {"out.csv", kSweepHeader}, {"out.csv.inputs", "model: other.yaml (preset)\nhardware: a100 (preset)\n"}},
       "sweep --hardware a100 -s gpipe -k 1 -m 1 --model {}/m.yaml --out {}/out.csv",
       "out.csv: its rows were computed with another model"},
      {"cli_sweep_rows_without_inputs", {{"m.yaml", kT}, {"out.csv", kSweepHeader}},
       "sweep --hardware a100 -s gpipe -k 1 -m 1 --model {}/m.yaml --out {}/out.csv", "out.csv.inputs beside it"},
      // --batch splits over M micro-batches on each of D replicas.
      {"cli_sweep_batch_uneven_over_data", {{"m.yaml", kT}},
       "sweep --hardware a100 -s gpipe -k 1 -m 2 -d 2 --batch 6 --model {}/m.yaml --out {}/out.csv",
       "--batch 6 does not split into 2 equal micro-batches (--microbatches) on each of 2 replicas (--data)"},
      // T and D: a group wider than a node, on a topology without groups, a layer Megatron
      // does not split, flags without their group, and the executor's refusal.
      {"cli_simulate_tensor_wider_than_node", {{"m.yaml", kT}},
       "simulate --hardware selene -s 1f1b -k 2 -m 2 -t 16 --model {}/m.yaml",
       "tensor-parallel groups of 16 GPUs do not divide a node's 8 GPUs (devices_per_host)"},
      {"cli_simulate_tensor_on_pcie_tree", {{"m.yaml", kT}},
       "simulate --hardware v100 -s 1f1b -k 2 -m 2 -t 2 --model {}/m.yaml",
       "needs a `cluster`, an `all-to-all` or a `shared-host` topology, not pcie-tree"},
      {"cli_simulate_tensor_unsplittable_layer", {{"m.yaml", kMlp}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -t 2 --model {}/m.yaml", "layer linear0 (linear) cannot be split over 2"},
      {"cli_simulate_sequence_parallel_without_tensor", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 --sequence-parallel --model {}/m.yaml",
       "--sequence-parallel needs --tensor T > 1"},
      {"cli_simulate_zero1_without_data", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 --zero1 --model {}/m.yaml", "--zero1 needs --data D > 1"},
      {"cli_simulate_zero3_without_data", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 --zero 3 --model {}/m.yaml", "--zero 3 needs --data D > 1"},
      {"cli_simulate_zero_past_three", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --zero 4 --model {}/m.yaml", "--zero", 2},
      {"cli_simulate_zero1_and_zero", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --zero1 --zero 2 --model {}/m.yaml", "excludes", 2},
      {"cli_simulate_reshard_without_zero3", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --zero 2 --reshard-after-forward off --model {}/m.yaml",
       "--reshard-after-forward off needs --zero 3"},
      {"cli_simulate_unshards_without_kept_weights", {{"m.yaml", kT}},
       "simulate --hardware a100 -s interleaved-1f1b -k 2 -v 2 -m 2 -d 2 --zero 3 --max-active-stages 1 --model {}/m.yaml",
       "--max-active-stages 1 needs --zero 3 --reshard-after-forward off"},
      {"cli_simulate_unshards_beside_the_files_own", {{"m.yaml", kT}, {"u.txt", "ranks 1\nmicrobatches 1\nstage_to_rank 0\n"
                                                                       "data_parallel 2\nzero 3\nreshard_after_forward off\n"
                                                                       "rank 0: 0UNSHARD 0F0 0B0 0RESHARD 0STEP\n"}},
       "simulate --hardware a100 -s {}/u.txt --max-active-stages 2 --model {}/m.yaml",
       "--max-active-stages 2 contradicts the schedule file"},
      {"cli_plan_unshards_without_kept_weights", {{"m.yaml", kT}},
       "plan --model {}/m.yaml --hardware a100 --gpus 4 --global-batch 8 --zero 3 --max-active-stages 3",
       "--max-active-stages 3 needs ZeRO-3 candidates keeping their weights"},
      {"cli_sweep_unshards_without_kept_weights", {{"m.yaml", kT}},
       "sweep --model {}/m.yaml --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --zero 2 --max-active-stages 3 --out {}/s.csv",
       "--max-active-stages 3 needs --zero 3 --reshard-after-forward off"},
      {"cli_validate_compute_on_a_sharded_stage", {{"u.txt", "ranks 1\nmicrobatches 2\nstage_to_rank 0\n"
                                                              "rank 0: 0UNSHARD 0F0 0B0 0RESHARD 0F1 0B1\n"}},
       "validate {}/u.txt", "rank 0, step 4: 0F1 computes on stage 0 while its weights are sharded"},
      {"cli_run_zero2_sequence_parallel", {{"m.yaml", kT}},
       "run -s 1f1b -k 2 -m 2 -t 2 -d 2 --sequence-parallel --zero 2 --model {}/m.yaml",
       "--zero 2 with --sequence-parallel: simulated only"},
      {"cli_simulate_shard_group_not_dividing", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 4 --zero 3 --shard-group 3 --model {}/m.yaml",
       "--shard-group 3 does not divide --data 4"},
      {"cli_simulate_shard_group_without_zero", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 4 --shard-group 2 --model {}/m.yaml",
       "--shard-group 2 needs --zero 1, 2 or 3"},
      {"cli_simulate_fp8_without_fp8_rate", {{"m.yaml", kT + "precision: bf16\n"}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 --precision fp8 --model {}/m.yaml",
       "gives no FP8 rate (peak_flops_fp8)"},
      {"cli_simulate_fp8_of_fp32_model", {{"m.yaml", kT}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 --precision fp8 --model {}/m.yaml", "is built in fp32"},
      {"cli_simulate_fp8_of_mlp", {{"m.yaml", kMlp + "precision: bf16\n"}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 --precision fp8 --model {}/m.yaml", "has no products FP8 runs"},
      {"cli_simulate_precision_unknown", {{"m.yaml", kT}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 --precision fp4 --model {}/m.yaml", "--precision", 2},
      {"cli_run_fp8", {{"m.yaml", kT + "precision: fp8\n"}}, "run --hardware h100 -s 1f1b -k 2 -m 2 --model {}/m.yaml",
       "precision fp8: simulated only"},
      {"cli_hardware_fp8_below_bf16", {{"m.yaml", kT}, {"h.yaml", "preset: h100\ndevice:\n  peak_flops_fp8: 5e14\n"}},
       "simulate --hardware {}/h.yaml -s 1f1b -k 2 -m 2 --model {}/m.yaml", "h.yaml:3: field 'device.peak_flops_fp8'"},
      {"cli_simulate_context_not_splitting", {{"m.yaml", kT}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 -c 3 --model {}/m.yaml",
       "sequence of 4 tokens does not split into 2 x 3 equal chunks"},
      {"cli_simulate_context_without_attention", {{"m.yaml", kMlp}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 -c 2 --model {}/m.yaml", "has no attention"},
      {"cli_simulate_context_attention_without_context", {{"m.yaml", kT}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 --context-attention all-gather --model {}/m.yaml",
       "--context-attention all-gather needs --context C > 1"},
      {"cli_sweep_context_attention_without_context", {{"m.yaml", kT}},
       "sweep --hardware h100 -s 1f1b -k 2 -m 2 --context-attention ring --model {}/m.yaml --out {}/s.csv",
       "--context-attention ring needs --context C > 1"},
      {"cli_plan_context_attention_without_context", {{"m.yaml", kT}},
       "plan --hardware h100 --gpus 2 --global-batch 4 --context-attention ring --model {}/m.yaml",
       "--context-attention ring needs --context C > 1"},
      {"cli_run_context", {{"m.yaml", kT}}, "run -s 1f1b -k 2 -m 2 -c 2 --model {}/m.yaml", "--context 2: simulated only"},
      {"cli_simulate_expert_on_dense_model", {{"m.yaml", kT}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 -d 2 -e 2 --model {}/m.yaml", "has none"},
      {"cli_simulate_expert_not_dividing_replicas", {{"m.yaml", kMoe}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 -d 2 -e 4 --model {}/m.yaml",
       "--expert 4 does not divide the 2 replicas of the weights"},
      {"cli_simulate_expert_not_dividing_experts", {{"m.yaml", kMoe}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 -d 8 -e 8 --batch 16 --model {}/m.yaml",
       "4 experts per layer do not split evenly over 8"},
      {"cli_moe_top_k_past_experts", {{"m.yaml", kMoeBase + "top_k: 5\n"}},
       "simulate --hardware h100 -s 1f1b -k 2 -m 2 --model {}/m.yaml", "field 'top_k'"},
      {"cli_run_moe_latent_attention",
       {{"m.yaml", kMoe + "kv_lora_rank: 8\nqk_nope_dim: 8\nqk_rope_dim: 4\nv_head_dim: 8\n"}},
       "run -s 1f1b -k 2 -m 2 --model {}/m.yaml", "layer block0: field 'kv_lora_rank'"},
      {"cli_run_moe_capacity", {{"m.yaml", kMoe + "capacity_factor: 1.25\n"}}, "run -s 1f1b -k 2 -m 2 --model {}/m.yaml",
       "field 'capacity_factor': the executor's experts are dropless"},
      {"cli_run_moe_router_bias", {{"m.yaml", kMoe + "router_bias: true\n"}}, "run -s 1f1b -k 2 -m 2 --model {}/m.yaml",
       "field 'router_bias'"},
      {"cli_run_expert_zero", {{"m.yaml", kMoe}}, "run -s 1f1b -k 2 -m 2 -d 2 -e 2 --zero 3 --model {}/m.yaml",
       "--expert 2 with --zero: simulated only"},
      {"cli_run_expert_buckets", {{"m.yaml", kMoe}}, "run -s 1f1b -k 2 -m 2 -d 2 -e 2 --grad-bucket-mb 1 --model {}/m.yaml",
       "--expert 2 with --grad-bucket-mb: simulated only"},
      {"cli_schedule_file_expert_not_dividing", {{"s.txt", "data_parallel 4\nexpert_parallel 3\nrank 0: 0F0 0B0\n"}},
       "validate {}/s.txt", "expert_parallel 3 must be at least 1 and divide data_parallel 4"},
      {"cli_schedule_file_context_not_dividing", {{"s.txt", "data_parallel 3\ncontext_parallel 2\nrank 0: 0F0 0B0\n"}},
       "validate {}/s.txt", "context_parallel 2 must be at least 1 and divide data_parallel 3"},
      {"cli_schedule_file_zero_past_three", {{"s.txt", "zero 5\nrank 0: 0F0 0B0\n"}}, "validate {}/s.txt",
       "'zero' (ZeRO's stage) must be 0, 1, 2 or 3, got 5"},
      {"cli_simulate_devices_past_int", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -t 65536 -d 65536 --model {}/m.yaml", "devices, more than pipetwin numbers"},
      {"cli_run_tensor_parallel_unsplittable_layer", {{"m.yaml", kMlp}}, "run --hardware a100 -s 1f1b -k 2 -m 2 -t 2 --model {}/m.yaml",
       "layer linear0"},
      {"cli_run_recompute_op", {{"m.yaml", "family: llm\nlayers: 2\nhidden: 16\nffn_hidden: 32\nheads: 2\nseq_len: 4\nvocab: 10\n"}},
       "run -s 1f1b -k 2 -m 2 --recompute op --model {}/m.yaml", "--recompute op: simulated only"},
      {"cli_run_grad_buckets_zero", {{"m.yaml", kT}}, "run -s 1f1b -k 2 -m 2 -d 2 --zero 1 --grad-bucket-mb 25 --model {}/m.yaml",
       "--grad-bucket-mb with --zero: simulated only"},
      {"cli_simulate_negative_grad_buckets", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --grad-bucket-mb -1 --model {}/m.yaml", "--grad-bucket-mb", 2},
      {"cli_simulate_recompute_op_unknown_family", {{"m.yaml", kT}},
       "simulate --hardware cpu -s 1f1b -k 2 -m 2 --recompute op --model {}/m.yaml",
       "recompute op (torchtitan's per-operator policy) is described for the llm family's decoder blocks"},
      {"cli_simulate_layout_stage_count", {{"m.yaml", kT}}, "simulate --hardware cpu -s 1f1b -k 2 -m 2 --partition 'E|t|tL' --model {}/m.yaml",
       "3 stages, but the schedule has 2 (K 2 x V 1)"},
      {"cli_calibrate_runs_without_rows", {{"r.csv", "# no header, no runs\n"}}, "calibrate --runs {}/r.csv", "r.csv: no header row"},
      {"cli_calibrate_runs_unknown_column", {{"r.csv", "model,hardware,speed\n"}}, "calibrate --runs {}/r.csv",
       "r.csv:1: unknown column 'speed'"},
      {"cli_simulate_recompute_block_without_count", {{"m.yaml", kT}}, "simulate --hardware cpu -s 1f1b -k 2 -m 2 --recompute block --model {}/m.yaml",
       "needs its layer count: block:N", 2},
      {"cli_run_data_parallel_weight_stashing", {{"m.yaml", kT}}, "run -s pipedream -k 2 -m 2 -d 2 --model {}/m.yaml",
       "-d 2 with weight stashing (2 weight versions)"},
      // The all-reduce's algorithm is one of three; the fast engine has no network for D > 1.
      {"cli_simulate_unknown_collective", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --collective butterfly --model {}/m.yaml", "--collective", 2},
      {"cli_simulate_fast_engine_with_data", {{"m.yaml", kT}},
       "simulate --hardware a100 -s 1f1b -k 2 -m 2 -d 2 --engine fast --model {}/m.yaml",
       "--engine fast cannot predict D = 2: the data-parallel gradient reductions (REDUCE_GRAD)"},
      // plan: inputs that leave no candidate, unknown model or hardware, a bad shard.
      {"cli_plan_batch_splits_no_way", {{"m.yaml", kT}},
       "plan --hardware a100 --gpus 2 --global-batch 3 --microbatch-sizes 2 --model {}/m.yaml -o {}/p.csv",
       "--gpus 2 and --global-batch 3: no candidate"},
      {"cli_plan_unknown_hardware", {{"m.yaml", kT}},
       "plan --hardware nope --gpus 2 --global-batch 4 --model {}/m.yaml -o {}/p.csv", "--hardware nope: hardware 'nope' is neither a preset"},
      {"cli_plan_missing_model", {}, "plan --hardware a100 --gpus 2 --global-batch 4 --model {}/none.yaml -o {}/p.csv",
       "--model {}/none.yaml: "},
      {"cli_plan_shard_out_of_range", {{"m.yaml", kT}},
       "plan --hardware a100 --gpus 2 --global-batch 4 --shard 3/3 --model {}/m.yaml -o {}/p.csv",
       "--shard 3/3: I must be at least 0 and below N"},
      {"cli_plan_shard_not_a_fraction", {{"m.yaml", kT}},
       "plan --hardware a100 --gpus 2 --global-batch 4 --shard half --model {}/m.yaml -o {}/p.csv",
       "--shard 'half' is not I/N"},
      // merge: parts of one plan, every shard once.
      {"cli_merge_missing_shard", {{"p0.csv", plan_part("a", 0, 2)}}, "merge {}/out.csv {}/p0.csv",
       "merge: shard 1/2 missing"},
      {"cli_merge_duplicate_shard", {{"p0.csv", plan_part("a", 0, 2)}, {"again.csv", plan_part("a", 0, 2)}},
       "merge {}/out.csv {}/p0.csv {}/again.csv", "{}/again.csv: shard 0/2 again ({}/p0.csv is shard 0/2 too)"},
      {"cli_merge_other_inputs", {{"p0.csv", plan_part("a", 0, 2)}, {"p1.csv", plan_part("b", 1, 2)}},
       "merge {}/out.csv {}/p0.csv {}/p1.csv", "{}/p1.csv: a part of another plan"},
      {"cli_merge_shard_counts_differ", {{"p0.csv", plan_part("a", 0, 2)}, {"p1.csv", plan_part("a", 1, 3, 2)}},
       "merge {}/out.csv {}/p0.csv {}/p1.csv", "{}/p1.csv: shard 1/3, but {}/p0.csv is shard 0/2"},
      {"cli_merge_not_a_part", {{"p0.csv", kSweepHeader}}, "merge {}/out.csv {}/p0.csv",
       "{}/p0.csv:1: not a results file of pipetwin plan"},
      {"cli_merge_incomplete_part", {{"p0.csv", plan_part("a", 0, 1, 3, true)}}, "merge {}/out.csv {}/p0.csv",
       "{}/p0.csv: 2 candidates, but shard 0/1 of 3 has 3: an incomplete part"},
      {"cli_partition_file_too_short", {{"m.yaml", kT}, {"p.txt", "0:1 1:2\n"}},
       "simulate --hardware a100 -s gpipe -k 2 -m 2 --model {}/m.yaml --partition {}/p.txt", "but transformer has 4 layers"},
      {"cli_partition_ranges_inline", {{"m.yaml", kT}},
       "simulate --hardware a100 -s gpipe -k 2 -m 2 --model {}/m.yaml --partition 0:3,3:6",
       "--partition '0:3,3:6' is neither auto, uniform, parameters, a Megatron-LM layout"},
      {"cli_out_in_missing_dir", {}, "schedule -s gpipe -k 2 -m 2 --out {}/no/dir/s.txt", "cannot open"},

      // compare PREDICTED MEASURED, on traces that `pipetwin simulate` wrote, edited.
      cmp("compare_truncated", [] { const auto t = fixture("p.json"); return t.substr(0, t.size() / 2); },
          "m.json: not a Chrome trace (invalid or truncated JSON"),
      cmp("compare_non_utf8", [] { return replace_first(fixture("p.json"), "\"0F0\"", "\"0F0\xff\xfe\""); },
          "m.json: not a Chrome trace (invalid or truncated JSON"),
      cmp("compare_empty_file", [] { return std::string(); }, "m.json: not a Chrome trace"),
      cmp("compare_no_trace_events", edited("p.json", [](json& j) { j.erase("traceEvents"); }),
          "m.json: not a Chrome trace (no 'traceEvents' list)"),
      cmp("compare_trace_events_not_a_list", edited("p.json", [](json& j) { j["traceEvents"] = json::object(); }),
          "m.json: not a Chrome trace (no 'traceEvents' list)"),
      cmp("compare_top_level_list", [] { return std::string("[1, 2]"); }, "m.json: not a Chrome trace (no 'traceEvents' list)"),
      cmp("compare_dur_a_string", edited("p.json", [](json& j) { event(j, "1F0")["dur"] = "12"; }),
          "fields 'ts' and 'dur' must be numbers"),
      cmp("compare_negative_dur", edited("p.json", [](json& j) { event(j, "1B1")["dur"] = -3.5; }),
          "'dur' not negative"),
      cmp("compare_pid_not_a_rank", edited("p.json", [](json& j) { event(j, "0F1")["pid"] = "zero"; }),
          "field 'pid' must be a rank"),
      cmp("compare_negative_pid", edited("p.json", [](json& j) { event(j, "0F1")["pid"] = -1; }),
          "field 'pid' must be a rank"),
      cmp("compare_event_missing_ts", edited("p.json", [](json& j) { event(j, "0B0").erase("ts"); }),
          "missing field 'ts'"),
      cmp("compare_event_not_an_action", edited("p.json", [](json& j) { event(j, "0B0")["name"] = "forward"; }),
          "field 'name'"),
      cmp("compare_ts_past_a_double", [] { return replace_first(fixture("p.json"), "\"ts\":0.0", "\"ts\":1e999"); },
          "m.json: not a Chrome trace"),
      cmp("compare_other_microbatches", [] { return fixture("p4.json"); },
          "m.json: otherData field 'microbatches' is 4 but {fix}/p.json has 2"),
      cmp("compare_other_schedule", [] { return fixture("pg.json"); },
          "m.json: otherData field 'schedule' is \"gpipe\" but {fix}/p.json has \"1f1b\""),
      cmp("compare_other_model", [] { return fixture("pt.json"); }, "m.json: otherData field 'model' is"),
      cmp("compare_other_partition", edited("p.json", [](json& j) { j["otherData"]["partition"] = {{0, 3}, {3, 7}}; }),
          "m.json: otherData field 'partition' is [[0,3],[3,7]] but {fix}/p.json has [[0,4],[4,7]]"),
      cmp("compare_other_ranks", edited("p.json", [](json& j) { j["otherData"]["ranks"] = 3; }),
          "m.json: otherData field 'ranks' is 3 but {fix}/p.json has 2"),
      cmp("compare_no_other_data", edited("p.json", [](json& j) { j.erase("otherData"); }),
          "m.json: otherData has no field 'model'"),
      // compare --schedule FILE: traces of another schedule, a malformed file, a trace without its program.
      Bad{"compare_schedule_of_another_order",
          {{"s.txt", "ranks 2\nmicrobatches 2\nrank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1F1 1B0 1B1\n"}},
          "compare --schedule {}/s.txt {fix}/p.json {fix}/p.json",
          "{fix}/p.json: rank 1's compute action 2 is 1B0, where {}/s.txt has 1F1: not the run of that schedule"},
      Bad{"compare_schedule_other_ranks", {{"s.txt", "ranks 1\nmicrobatches 2\nrank 0: 0F0 0F1 0B0 0B1\n"}},
          "compare --schedule {}/s.txt {fix}/p.json {fix}/p.json",
          "{fix}/p.json: ran 2 ranks and 2 stages, but {}/s.txt has 1 ranks and 1 stages"},
      Bad{"compare_schedule_malformed_file", {{"s.txt", "ranks 2\nmicrobatches 2\nrank 0: 0F0 0X1\n"}},
          "compare --schedule {}/s.txt {fix}/p.json {fix}/p.json", "s.txt:3"},
      Bad{"compare_schedule_trace_without_program",
          {{"s.txt", "ranks 2\nmicrobatches 2\nrank 0: 0F0 0F1 0B0 0B1\nrank 1: 1F0 1B0 1F1 1B1\n"}},
          "compare --schedule {}/s.txt {fix}/p.json {}/m.json", "m.json: otherData has no 'program'", 1,
          {{"m.json", edited("p.json", [](json& j) { j["otherData"].erase("program"); })}}},
      cmp("compare_missing_rank", edited("p.json", [](json& j) { drop_rank(j, 1); }),
          "m.json: rank 1 has no action 1RECV_F0"),
      cmp("compare_duplicate_action", edited("p.json", [](json& j) { j["traceEvents"].push_back(event(j, "1F1")); }),
          "m.json: rank 1 holds action 1F1 twice"),
      cmp("compare_extra_action", edited("p.json", [](json& j) { event(j, "1F1")["name"] = "1F7"; }),
          "m.json: rank 1 has no action 1F1 ({fix}/p.json's rank 1 has it)"),
      cmp("compare_stash_not_numbers",
          edited("p.json", [](json& j) { j["otherData"]["predicted_stash_bytes_per_stage"] = {"a lot", 3}; }),
          "m.json: otherData field 'predicted_stash_bytes_per_stage' entry 0 is not a number"),
      {"compare_measured_given_first", {}, "compare {}/m.json {}/p.json",
       "{}/m.json: otherData field 'producer' is \"pipetwin run\" (a measured trace) and {}/p.json was predicted", 1,
       {{"p.json", [] { return fixture("p.json"); }}, {"m.json", edited("p.json", [](json& j) { as_measured(j); })}}},
      {"compare_missing_file", {}, "compare {fix}/p.json {}/m.json", "{}/m.json: cannot open"},
      // compare --repeats: every repeat a measured run of the measured configuration.
      {"compare_repeat_of_another_configuration", {}, "compare {fix}/p.json {}/m.json --repeats {}/r.json",
       "{}/r.json: otherData field 'schedule' is \"gpipe\" but {}/m.json has \"1f1b\"", 1,
       {{"m.json", edited("p.json", [](json& j) { as_measured(j); })}, {"r.json", edited("pg.json", [](json& j) { as_measured(j); })}}},
      {"compare_repeat_that_is_a_prediction", {}, "compare {fix}/p.json {}/m.json --repeats {fix}/p.json",
       "{fix}/p.json: otherData field 'producer' is \"pipetwin simulate\": a repeat must be a measured run", 1,
       {{"m.json", edited("p.json", [](json& j) { as_measured(j); })}}},
      {"compare_repeat_missing_file", {}, "compare {fix}/p.json {}/m.json --repeats {}/r.json", "{}/r.json: cannot open", 1,
       {{"m.json", edited("p.json", [](json& j) { as_measured(j); })}}},
      // calibrate TRACE... --out: the same and more; the calibrated file must not appear.
      cal("calibrate_truncated", [] { const auto t = fixture("p.json"); return t.substr(0, t.size() - 40); },
          "t.json: not a Chrome trace (invalid or truncated JSON"),
      cal("calibrate_non_utf8_model_spec", [] { return replace_first(fixture("p.json"), "family: mlp", "family: \xc3\x28mlp"); },
          "t.json: not a Chrome trace (invalid or truncated JSON"),
      cal("calibrate_no_trace_events", edited("p.json", [](json& j) { j.erase("traceEvents"); }), "t.json: not a Chrome trace"),
      cal("calibrate_ts_a_string", edited("p.json", [](json& j) { event(j, "0F0")["ts"] = "0"; }),
          "fields 'ts' and 'dur' must be numbers"),
      cal("calibrate_negative_dur", edited("p.json", [](json& j) { event(j, "0B1")["dur"] = -1; }), "'dur' not negative"),
      cal("calibrate_missing_rank", edited("p.json", [](json& j) { drop_rank(j, 1); }), "t.json: rank 1 is missing"),
      cal("calibrate_missing_action",
          edited("p.json", [](json& j) {
            auto& ev = j["traceEvents"];
            ev.erase(std::find_if(ev.begin(), ev.end(), [](const json& e) { return e.value("name", "") == "1B1"; }));
          }),
          "t.json: rank 1: action 1B1 is missing"),
      cal("calibrate_action_not_in_schedule", edited("p.json", [](json& j) { event(j, "0F1")["name"] = "0F5"; }),
          "t.json: rank 0: action 0F1 is missing"),
      cal("calibrate_action_twice", edited("p.json", [](json& j) { j["traceEvents"].push_back(event(j, "0F1")); }),
          "t.json: rank 0: action 0F1 appears 2 times"),
      cal("calibrate_no_model_spec", edited("p.json", [](json& j) { j["otherData"].erase("model_spec"); }),
          "t.json: otherData has no 'model_spec'"),
      cal("calibrate_bad_model_spec",
          edited("p.json", [](json& j) { j["otherData"]["model_spec"] = "family: mlp\ninput: -256\nhidden: [8]\noutput: 2\n"; }),
          "t.json (otherData.model_spec):2: field 'input': must be positive"),
      cal("calibrate_ranks_a_string", edited("p.json", [](json& j) { j["otherData"]["ranks"] = "2"; }),
          "t.json: otherData.ranks must be an integer"),
      cal("calibrate_zero_microbatches", edited("p.json", [](json& j) { j["otherData"]["microbatches"] = 0; }),
          "t.json: otherData.microbatches must be an integer from 1"),
      cal("calibrate_huge_k_and_m",
          edited("p.json", [](json& j) {
            j["otherData"]["ranks"] = 4000;
            j["otherData"]["microbatches"] = 1000000;
          }),
          "t.json: otherData gives 4000 ranks x 1 stages per rank x 1000000 micro-batches"),
      cal("calibrate_schedule_other_than_its_program", edited("p.json", [](json& j) { j["otherData"]["schedule"] = "chimera"; }),
          "t.json: otherData.program has schedule 1f1b but otherData.schedule is chimera"),
      // A trace written before traces recorded their Program: its schedule is regenerated by name.
      cal("calibrate_unknown_schedule", edited("p.json", [](json& j) {
            j["otherData"].erase("program");
            j["otherData"]["schedule"] = "chimera";
          }),
          "t.json: otherData does not name a schedule pipetwin can regenerate"),
      cal("calibrate_unknown_optimizer", edited("p.json", [](json& j) { j["otherData"]["optimizer"] = "adagrad"; }),
          "t.json: otherData.optimizer: unknown optimizer 'adagrad' (valid: sgd, momentum, adam)"),
      cal("calibrate_program_not_a_schedule", edited("p.json", [](json& j) { j["otherData"]["program"] = "rank 0: 0X9"; }),
          "t.json (otherData.program):"),
      cal("calibrate_partition_with_a_gap", edited("p.json", [](json& j) { j["otherData"]["partition"] = {{0, 4}, {5, 7}}; }),
          "t.json: otherData.partition: stage 1 holds layers 5:7"),
      cal("calibrate_measured_ranks_short",
          edited("p.json", [](json& j) {
            as_measured(j);
            j["otherData"]["measured"]["ranks"].erase(1);
          }),
          "t.json: otherData.measured.ranks must list the 2 ranks"),
      cal("calibrate_zero_durations",
          edited("p.json", [](json& j) {
            for (auto& e : j["traceEvents"]) {
              if (e.value("ph", "") == "X") e["dur"] = 0, e["ts"] = 0;
            }
          }),
          "t.json: the step takes no time"),
      {"calibrate_two_models", {}, "calibrate {}/a.json {}/b.json --hardware cpu --out {}/out.yaml",
       "{}/b.json: its model has model", 1,
       {{"a.json", [] { return fixture("p.json"); }}, {"b.json", [] { return fixture("pt.json"); }}}},
      // A T > 1 run's seconds in its tensor collectives: one number per step, finite, not negative.
      {"calibrate_tp_collective_not_numbers", {}, "calibrate {}/a.json {}/b.json --hardware cpu --out {}/out.yaml",
       "{}/b.json: otherData.measured.ranks[0].tp_collective_s must list a finite, non-negative number of seconds "
       "for each step, the trace's step 0 included", 1,
       {{"a.json", edited("p.json", [](json& j) { as_measured(j); })},
        {"b.json", edited("pd.json", [](json& j) {
           as_measured(j);
           j["otherData"]["measured"]["representative_step"] = 0;
           j["otherData"]["measured"]["ranks"][0]["tp_collective_s"] = json::array({"fast"});
         })}}},
      {"calibrate_two_thread_counts", {}, "calibrate {}/a.json {}/b.json --hardware cpu --out {}/out.yaml",
       "{}/b.json: rank 0 ran with 2 intra-op threads, but {}/a.json with 1", 1,
       {{"a.json", edited("p.json", [](json& j) { as_measured(j, 1); })},
        {"b.json", edited("p4.json", [](json& j) { as_measured(j, 2); })}}},
      cal("calibrate_negative_host_cores",
          edited("p.json", [](json& j) {
            as_measured(j);
            j["otherData"]["measured"]["ranks"][1]["host_cores"] = -4;
          }),
          "t.json: otherData.measured.ranks[1].host_cores must not be negative, got -4"),
      cal("calibrate_bubble_fraction_out_of_range",
          edited("p.json", [](json& j) {
            as_measured(j);
            j["otherData"]["measured"]["bubble_fractions"] = {0.5, 1.5};
          }),
          "t.json: otherData.measured.bubble_fractions[1] must be a fraction between 0 and 1, got 1.5"),
      {"calibrate_two_host_core_counts", {}, "calibrate {}/a.json {}/b.json --hardware cpu --out {}/out.yaml",
       "{}/b.json: rank 0 ran on a host with 2 usable cores, but {}/a.json on one with 16", 1,
       {{"a.json", edited("p.json", [](json& j) {
          as_measured(j);
          for (auto& r : j["otherData"]["measured"]["ranks"]) r["host_cores"] = 16;
        })},
        {"b.json", edited("p4.json", [](json& j) {
          as_measured(j);
          for (auto& r : j["otherData"]["measured"]["ranks"]) r["host_cores"] = 2;
        })}}},
      {"calibrate_missing_trace", {}, "calibrate {}/none.json --hardware cpu --out {}/out.yaml", "{}/none.json: cannot open"},
      {"calibrate_same_trace_twice", {}, "calibrate {fix}/p.json {}/../$(basename {})/m.json {}/m.json --hardware cpu --out {}/out.yaml",
       "{}/m.json: given twice (also as {}/../", 1, {{"m.json", [] { return fixture("p4.json"); }}}},
      {"calibrate_measured_with_simulated", {}, "calibrate {}/a.json {}/b.json --hardware cpu --out {}/out.yaml",
       "{}/b.json: not measured (otherData.producer is 'pipetwin simulate', not 'pipetwin run'), but {}/a.json is", 1,
       {{"a.json", edited("p.json", [](json& j) { as_measured(j); })}, {"b.json", [] { return fixture("p4.json"); }}}},
      cal("calibrate_duration_past_days", edited("p.json", [](json& j) { event(j, "0B1")["dur"] = 1e300; }),
          "must be at most 1e12 us (11.6 days) in size"),
      {"calibrate_out_in_missing_dir", {}, "calibrate {fix}/p.json --hardware cpu --out {}/no/dir/cal.yaml",
       "{}/no/dir/cal.yaml: cannot open"},
      {"calibrate_non_utf8_out_name", {}, "calibrate {fix}/p.json --out \"$(printf '{}/c\\377.yaml')\"",
       "{}/c\\xff.yaml: the file name is not UTF-8"},
      {"calibrate_bad_base_hardware", {{"hw.yaml", "preset: cpu\ndevice:\n  memory_gb: zero\n"}},
       "calibrate {fix}/p.json --hardware {}/hw.yaml --out {}/out.yaml", "hw.yaml:3: field 'device.memory_gb'"},
      // A hardware file written by `pipetwin calibrate`, corrupted, read by simulate --hardware.
      calhw("calhw_points_decreasing_work", "      forward: {", "      forward: {points: [[2e6, 0.5], [1e6, 0.6]]}",
            "cal.yaml{line}field 'device.kinds.default.forward.points': the points' works must increase"),
      calhw("calhw_points_negative_work", "      forward: {", "      forward: {points: [[-1e6, 0.5], [1e6, 0.6]]}",
            "cal.yaml{line}field 'device.kinds.default.forward.points': a point's work must be positive"),
      calhw("calhw_points_efficiency_above_one", "      backward: {", "      backward: {points: [[1e6, 1.5]]}",
            "cal.yaml{line}field 'device.kinds.default.backward.points': a point's efficiency must be in (0, 1], got 1.5"),
      calhw("calhw_points_efficiency_zero", "      backward: {", "      backward: {points: [[1e6, 0]]}",
            "cal.yaml{line}field 'device.kinds.default.backward.points': a point's efficiency must be in (0, 1], got 0"),
      calhw("calhw_points_not_pairs", "      backward: {", "      backward: {points: [1e6, 0.5]}",
            "cal.yaml{line}field 'device.kinds.default.backward.points': expected [work, efficiency] pairs"),
      calhw("calhw_points_and_max", "      backward: {", "      backward: {max: 0.5, points: [[1e6, 0.5]]}",
            "cal.yaml{line}field 'device.kinds.default.backward.points': replaces max and half_flops"),
      calhw("calhw_kind_efficiency_above_one", "      forward: {", "      forward: {max: 1.5, half_flops: 0}",
            "cal.yaml{line}field 'device.kinds.default.forward.max': is a share of peak and must be at most 1"),
      calhw("calhw_kind_efficiency_zero", "      forward: {", "      forward: {max: 0, half_flops: 0}",
            "cal.yaml{line}field 'device.kinds.default.forward.max': must be positive"),
      calhw("calhw_kind_efficiency_negative", "      forward: {", "      forward: {max: -0.2, half_flops: 0}",
            "cal.yaml{line}field 'device.kinds.default.forward.max': must be positive"),
      calhw("calhw_kind_efficiency_a_string", "      forward: {", "      forward: {max: high, half_flops: 0}",
            "cal.yaml{line}field 'device.kinds.default.forward.max': expected a number, got 'high'"),
      calhw("calhw_unknown_kind", "    linear:", "    lstm:", "cal.yaml{line}field 'device.kinds.lstm': unknown"),
      calhw("calhw_negative_overhead", "  action_overhead_us:", "  action_overhead_us: {forward: -5, backward: 1}",
            "cal.yaml{line}field 'device.action_overhead_us.forward': must not be negative"),
      calhw("calhw_effective_cores_below_one", "  host_cores:", "  effective_cores: 0.5",
            "cal.yaml{line}field 'topology.effective_cores': must be at least 1"),
      calhw("calhw_full_host_wait_negative", "  host_cores:", "  full_host_send_us: -40",
            "cal.yaml{line}field 'topology.full_host_send_us': must not be negative"),
      calhw("calhw_oversubscribed_action_negative", "  host_cores:", "  oversubscribed_action_us: -50",
            "cal.yaml{line}field 'topology.oversubscribed_action_us': must not be negative"),
      calhw("calhw_weight_stream_negative", "  overlap_factor:", "  weight_stream_us_per_mb: {forward: -1, backward: 0}",
            "cal.yaml{line}field 'device.weight_stream_us_per_mb.forward': must not be negative"),
      calhw("calhw_residuals_not_a_mapping", "  residuals:", "  residuals: 3\n  old_residuals:",
            "cal.yaml{line}field 'calibration.residuals': expected a mapping"),
      calhw("calhw_residual_not_a_number", "    overall: {", "    overall: {count: many, rms_us: 1}",
            "cal.yaml{line}field 'calibration.residuals.overall.count': expected a number, got 'many'"),
      calhw("calhw_residual_negative", "    overall: {", "    overall: {count: 3, rms_us: -1}",
            "cal.yaml{line}field 'calibration.residuals.overall.rms_us': must not be negative"),
      calhw("calhw_fitted_on_not_a_list", "  fitted_on:", "  fitted_on: 2\n  was:",
            "cal.yaml{line}field 'calibration.fitted_on': expected a list of the traces"),
      calhw("calhw_coefficient_value_not_a_number", "    - {name: step.overhead_s", "    - {name: step.overhead_s, value: fast}",
            "cal.yaml{line}field 'calibration.coefficients[9].value': expected a number"),
      {"calhw_calibration_a_list", {}, calhw_args, "cal.yaml{line}field 'calibration': expected a mapping", 1,
       {{"cal.yaml", [] {
          const auto t = fixture("cal.yaml");
          return t.substr(0, t.find("\ncalibration:\n") + 1) + "calibration: [1, 2]\n";
        }}}},
      {"calhw_truncated", {}, calhw_args, "cal.yaml{line}malformed YAML: end of map flow not found", 1,
       {{"cal.yaml", [] {
          const auto t = fixture("cal.yaml");
          return t.substr(0, t.find("forward: {max: ") + 20);
        }}}},
      {"calhw_truncated_after_kinds", {}, calhw_args, "cal.yaml{line}field 'device.kinds': expected a mapping", 1,
       {{"cal.yaml", [] {
          const auto t = fixture("cal.yaml");
          return t.substr(0, t.find("\n  kinds:\n") + 10);
        }}}},
      calhw("calhw_non_utf8_name", "name: \"cpu-calibrated\"", "name: \"cpu-\xff\xfe\"",
            "cal.yaml{line}not UTF-8 text (byte \\xff at column 12)"),
      // pipetwin plot: a wrong or malformed file for the kind; no PNG or SVG left.
      {"plot_gantt_missing_file", {}, "plot gantt {}/p.json --out {}/g", "{}/p.json: no such file"},
      {"plot_gantt_given_a_csv", {{"s.csv", "k,m,step_time_s\n2,4,0.1\n"}}, "plot gantt {}/s.csv --out {}/g",
       "s.csv: not"},
      {"plot_gantt_truncated_trace", {}, "plot gantt {}/p.json --out {}/g", "p.json:", 1,
       {{"p.json", [] { const auto t = fixture("p.json"); return t.substr(0, t.size() / 3); }}}},
      {"plot_gantt_non_utf8", {{"p.json", "{\"traceEvents\": [\"\xff\"]}"}}, "plot gantt {}/p.json --out {}/g", "p.json:"},
      {"plot_bubble_given_a_trace", {}, "plot bubble {fix}/p.json --out {}/b", "p.json: not a sweep CSV"},
      // A measured run of another micro-batch size than the plotted sweep rows.
      {"plot_bubble_measured_other_microbatch_size",
       {{"s.csv", kSweepHeader + "gpipe,none,2,1,2,2,ok,1.0,2.0,0.3,1.0,fast,\n"},
        {"run.json", "{\"schedule\": \"gpipe\", \"recompute\": \"none\", \"ranks\": 2, \"microbatches\": 2, "
                     "\"batch\": 8, \"microbatch_size\": 4, \"summary\": {\"bubble_fraction\": 0.3}}"}},
       "plot bubble {}/s.csv --measured {}/run.json --out {}/b",
       "run.json: field 'microbatch_size' is 4 but the plotted sweep rows have 1.0"},
      {"plot_heatmap_malformed_csv", {{"s.csv", "schedule,ranks\n1f1b,2,3,4\n\"unclosed\n"}},
       "plot heatmap {}/s.csv --out {}/h", "s.csv"},
      {"plot_speedup_empty_csv", {{"s.csv", ""}}, "plot speedup {}/s.csv --out {}/s", "s.csv"},
      {"plot_memory_given_a_csv", {{"s.csv", "a,b\n1,2\n"}}, "plot memory {}/s.csv --out {}/m", "s.csv"},
      {"plot_report_compare_not_json", {{"c.json", "step_time_s: 1\n"}}, "plot report --compare {}/c.json --out {}/r",
       "c.json"},
      {"plot_gantt_two_configurations", {}, "plot gantt {fix}/p.json {fix}/p4.json --out {}/g",
       "p4.json: field 'microbatches' is 4 but"},
      // Command lines of compare, calibrate and plot.
      {"cli_compare_one_trace", {}, "compare {fix}/p.json", "measured is required", 2},
      {"cli_calibrate_without_out", {}, "calibrate {fix}/p.json", "--out is required", 2},
      {"cli_calibrate_unknown_engine", {}, "calibrate {fix}/p.json --out {}/out.yaml --engine warp", "--engine", 2},
      {"cli_calibrate_only_parallel_traces", {}, "calibrate {fix}/pd.json {fix}/pdd.json --out {}/out.yaml",
       "every trace given is tensor- or data-parallel (T or D > 1)"},
      {"cli_plot_unknown_kind", {}, "plot pie {fix}/p.json --out {}/g", "pie", 2},
      {"cli_negative_batch", {}, "simulate --hardware cpu -s 1f1b -k 2 -m 2 --batch -4 --model {fix}/t.yaml",
       "--batch: must be positive, got -4", 2},
      {"cli_run_zero_learning_rate", {}, "run --model {fix}/t.yaml -s 1f1b -k 2 -m 2 --lr 0",
       "--lr: must be positive, got 0", 2},
      {"cli_run_unknown_heap_policy", {}, "run --model {fix}/t.yaml -s 1f1b -k 2 -m 2 --malloc jemalloc",
       "--malloc: jemalloc not in {keep,system}", 2},
  };
  for (auto& b : all) {
    b.grid = b.name == "text_missing_backward" || b.name == "text_deadlock" || b.name == "simulate_schedule_file_deadlocks" ||
             b.name == "cli_validate_compute_on_a_sharded_stage";
  }
  return all;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
  return s;
}

// "{fix}" is the fixture folder, "{}" the case's.
std::string expand(const std::string& s, const fs::path& dir) {
  return replace_all(replace_all(s, "{fix}", fixture_dir().string()), "{}", dir.string());
}

// `expect` in `text`; "{line}" in `expect` stands for ":<line number>: ".
bool matches(const std::string& text, const std::string& expect) {
  const auto cut = expect.find("{line}");
  if (cut == std::string::npos) return text.find(expect) != std::string::npos;
  const std::string before = expect.substr(0, cut), after = expect.substr(cut + 6);
  for (auto at = text.find(before); at != std::string::npos; at = text.find(before, at + 1)) {
    std::size_t i = at + before.size();
    if (i >= text.size() || text[i] != ':') continue;
    std::size_t digits = 0;
    while (i + 1 + digits < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1 + digits]))) ++digits;
    if (digits > 0 && text.compare(i + 1 + digits, 2 + after.size(), ": " + after) == 0) return true;
  }
  return false;
}

struct Outcome {
  fs::path dir;
  std::map<std::string, std::string> inputs;  // relative path -> contents written
  std::string setup_error;                    // a fixture that could not be made
  Run run;
  std::map<std::string, std::string> after;   // every file under dir afterwards -> contents ("" for a folder)
};

fs::path case_dir(const Bad& b) {
  return fs::temp_directory_path() / ("pipetwin_bad_" + std::to_string(::getpid()) + "_" + b.name);
}

Outcome run_case(const Bad& b) {
  Outcome o;
  o.dir = case_dir(b);
  fs::remove_all(o.dir);
  fs::create_directories(o.dir);
  try {
    for (const auto& [name, text] : b.files) o.inputs[name] = text;
    for (const auto& [name, make] : b.made) o.inputs[name] = make();
  } catch (const std::exception& e) {
    o.setup_error = e.what();
    return o;
  }
  for (const auto& [name, text] : o.inputs) pipetwin::schedule::write_file_atomic((o.dir / name).string(), text);
  o.run = run_binary(expand(b.args, o.dir), o.dir.string() + ".stderr");
  for (const auto& entry : fs::recursive_directory_iterator(o.dir)) {
    const std::string rel = fs::relative(entry.path(), o.dir).string();
    o.after[rel] = entry.is_regular_file() ? pipetwin::schedule::read_file(entry.path().string()) : "";
  }
  fs::remove_all(o.dir);
  return o;
}

std::vector<Bad> cases() {
  static const std::vector<Bad> all = catalogue();
  return all;
}

// Every case's outcome, run the first time one is asked for: a few commands at a time.
const Outcome& outcome(const std::string& name) {
  static const std::map<std::string, Outcome> outcomes = [] {
    const auto all = cases();
    (void)fixture_dir();
    std::vector<Outcome> done(all.size());
    std::atomic<std::size_t> next{0};
    const unsigned workers = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < workers; ++w) {
      pool.emplace_back([&] {
        for (std::size_t i; (i = next++) < all.size();) done[i] = run_case(all[i]);
      });
    }
    for (auto& t : pool) t.join();
    std::map<std::string, Outcome> out;
    for (std::size_t i = 0; i < all.size(); ++i) out[all[i].name] = std::move(done[i]);
    fs::remove_all(fixture_dir());
    return out;
  }();
  return outcomes.at(name);
}

class BadInput : public ::testing::TestWithParam<Bad> {};

void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_P(BadInput, ClearErrorNonZeroExitNoOutput) {
  const auto& b = GetParam();
  const Outcome& o = outcome(b.name);
  ASSERT_EQ(o.setup_error, "") << b.name << ": its input could not be made";
  const auto& r = o.run;
  const std::string both = r.out + r.err;
  // Not killed: pclose's status is the shell's, which exits 128 + N when its child dies of signal N.
  ASSERT_TRUE(WIFEXITED(r.status)) << b.name << " did not exit normally\n" << both;
  ASSERT_LT(WEXITSTATUS(r.status), 128) << b.name << " died of a signal\n" << both;
  EXPECT_EQ(WEXITSTATUS(r.status), b.code) << b.name << "\n" << both;
  const std::string expect = expand(b.expect, o.dir);
  EXPECT_TRUE(matches(r.err, expect)) << b.name << ": expected in stderr: " << expect << "\n" << both;
  for (const char* crash : {"terminate called", "Aborted", "core dumped", "Segmentation", "internal error", "what():",
                            "Traceback", "#0 ", "#1 "}) {
    EXPECT_EQ(both.find(crash), std::string::npos) << b.name << " shows '" << crash << "'\n" << both;
  }
  // One message on stderr, and nothing on stdout.
  EXPECT_EQ(r.out, "") << b.name << ": printed on stdout before failing";
  const auto lines = lines_of(r.err);
  ASSERT_FALSE(lines.empty()) << b.name << ": no message";
  EXPECT_EQ(r.err.back(), '\n') << b.name;
  if (b.code == 1) {
    const bool from_pipetwin = lines[0].rfind("pipetwin: error: ", 0) == 0;
    const bool from_plot = lines[0].rfind("pipetwin plot ", 0) == 0 && lines[0].find(": error: ") != std::string::npos;
    EXPECT_TRUE(from_pipetwin || from_plot) << b.name << ": the message starts the first line\n" << r.err;
    if (b.grid) {
      // The grid follows: a header naming the ranks, and the action at fault marked.
      EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("<-- ERROR HERE"), std::string::npos) << r.err;
    } else {
      EXPECT_EQ(lines.size(), 1u) << b.name << ": one line\n" << r.err;
    }
  } else {
    // CLI11 follows its one-line message with a hint, the one second line allowed.
    EXPECT_LE(lines.size(), 2u) << b.name << "\n" << r.err;
    if (lines.size() == 2) {
      EXPECT_EQ(lines[1], "Run with --help for more information.") << b.name;
    }
  }
  // The folder holds exactly the inputs, unchanged: no output, no temporary.
  std::map<std::string, std::string> expected_files = o.inputs;
  for (const auto& [name, text] : o.inputs) {  // and the folders that hold them
    for (fs::path p = fs::path(name).parent_path(); !p.empty(); p = p.parent_path()) expected_files[p.string()] = "";
  }
  for (const auto& [name, text] : o.after) {
    const auto it = expected_files.find(name);
    if (it == expected_files.end()) {
      ADD_FAILURE() << b.name << " left " << name << " behind";
    } else {
      EXPECT_TRUE(it->second == text) << b.name << " changed its input " << name;
    }
  }
  for (const auto& [name, text] : expected_files) EXPECT_TRUE(o.after.count(name)) << b.name << " removed " << name;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInput, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadInputCatalogue, HoldsAtLeastFifty) { EXPECT_GE(cases().size(), 50u); }

TEST(BadInputCatalogue, NamesAreUnique) {
  std::map<std::string, int> seen;
  for (const auto& b : cases()) EXPECT_EQ(++seen[b.name], 1) << b.name;
}
