// The training-log readers (calibration/runs.hpp, calibration/run_logs*.cpp)
// on logs and job files written as Megatron-LM and torchtitan print them
// (tests/calibration/data/): the configuration and model they give, the
// median step, and errors that name the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "calibration/run_logs_parse.hpp"
#include "calibration/runs.hpp"
#include "models/families.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "tests/support/errors.hpp"

namespace pc = pipetwin::calibration;
namespace logs = pipetwin::calibration::logs;

namespace {

std::string data(const std::string& name) { return std::string(PIPETWIN_CALIBRATION_DATA_DIR) + "/" + name; }

// A file under the test's temporary folder holding `text`.
std::string write(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "pipetwin-test-run-logs";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

std::string read(const std::string& path) {
  std::string text;
  for (const std::string& line : logs::read_lines(path)) text += line + "\n";
  return text;
}

using pipetwin::test::error_of;

// `text` with the first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(MegatronLog, ReadsTheConfigurationAndTheMedianStep) {
  const pc::MeasuredRun r = pc::read_megatron_log(data("megatron-gpt-1.7b.log"), "h100", 2);
  EXPECT_EQ(r.name, "megatron-gpt-1.7b");
  EXPECT_EQ(r.source, data("megatron-gpt-1.7b.log"));
  EXPECT_EQ(r.hardware, "h100");
  EXPECT_EQ(r.tensor, 2);
  EXPECT_EQ(r.pipeline, 2);
  EXPECT_EQ(r.data, 2);
  EXPECT_EQ(r.virtual_stages, 2);
  EXPECT_EQ(r.schedule, "interleaved-1f1b");
  EXPECT_EQ(r.microbatch_size, 2);
  EXPECT_EQ(r.global_batch, 64);
  EXPECT_EQ(r.microbatches, 16);  // 64 / (2 x 2)
  EXPECT_EQ(r.recompute, "uniform:1");
  EXPECT_TRUE(r.sequence_parallel);
  EXPECT_EQ(r.zero, 1);
  // Iterations 3..10: 1396.3 1398.1 1399.4 1401.2 | 1402.5 1403.0 1405.9 1410.8.
  EXPECT_NEAR(r.step_s, (1401.2 + 1402.5) / 2 / 1000, 1e-9);
  EXPECT_TRUE(r.model.empty());
  EXPECT_EQ(r.model_text,
            "family: llm\nlayers: 24\nhidden: 2304\nffn_hidden: 9216\nheads: 24\nkv_heads: 24\nseq_len: 2048\n"
            "vocab: 50432\nmlp: gelu\nnorm: layernorm\npositions: learned\ntied_embeddings: true\nbias: true\n"
            "dropout: true\nflash_attention: true\nprecision: bf16\n");
}

TEST(MegatronLog, SkipCountsLoggedIterations) {
  // Nothing skipped: the first two (4120.7 and 1712.3 ms) move the median up.
  EXPECT_NEAR(pc::read_megatron_log(data("megatron-gpt-1.7b.log"), "h100", 0).step_s, (1402.5 + 1403.0) / 2 / 1000, 1e-9);
  EXPECT_NEAR(pc::read_megatron_log(data("megatron-gpt-1.7b.log"), "h100", 9).step_s, 1.403, 1e-9);
  const std::string e = error_of([] { pc::read_megatron_log(data("megatron-gpt-1.7b.log"), "h100", 10); });
  EXPECT_NE(e.find("megatron-gpt-1.7b.log"), std::string::npos) << e;
  EXPECT_NE(e.find("elapsed time per iteration"), std::string::npos) << e;
  EXPECT_NE(e.find("found 10"), std::string::npos) << e;
}

// A 2021 log: "0: " launcher prefixes, lines of other ranks inside the
// arguments block, no timestamps, activations_checkpoint_method, fp16, and
// none of the later model arguments (LayerNorm, GELU, learned positions).
TEST(MegatronLog, ReadsA2021Log) {
  const pc::MeasuredRun r = pc::read_megatron_log(data("megatron-gpt-345m-2021.log"), "a100", 1);
  EXPECT_EQ(r.tensor, 1);
  EXPECT_EQ(r.pipeline, 2);
  EXPECT_EQ(r.data, 4);
  EXPECT_EQ(r.virtual_stages, 1);
  EXPECT_EQ(r.schedule, "1f1b");
  EXPECT_EQ(r.microbatch_size, 4);
  EXPECT_EQ(r.microbatches, 2);  // 32 / (4 x 4)
  EXPECT_EQ(r.recompute, "block:2");
  EXPECT_FALSE(r.sequence_parallel);
  EXPECT_EQ(r.zero, 0);
  EXPECT_NEAR(r.step_s, 0.6056, 1e-9);  // median of 610.4, 600.2, 605.6
  EXPECT_EQ(r.model_text,
            "family: llm\nlayers: 24\nhidden: 1024\nffn_hidden: 4096\nheads: 16\nkv_heads: 16\nseq_len: 1024\n"
            "vocab: 50304\nmlp: gelu\nnorm: layernorm\npositions: learned\ntied_embeddings: true\nbias: true\n"
            "dropout: true\nflash_attention: false\nprecision: fp16\n");
}

// A Llama-style run: the 1.7 B log's arguments edited as such a run prints them.
TEST(MegatronLog, MapsALlamaStyleRun) {
  std::string text = read(data("megatron-gpt-1.7b.log"));
  text = replaced(text, "group_query_attention ........................... False", "group_query_attention ........................... True");
  text = replaced(text, "num_query_groups ................................ 1", "num_query_groups ................................ 8");
  text = replaced(text, "normalization ................................... LayerNorm", "normalization ................................... RMSNorm");
  text = replaced(text, "position_embedding_type ......................... learned_absolute", "position_embedding_type ......................... rope");
  text = replaced(text, "swiglu .......................................... False", "swiglu .......................................... True");
  text = replaced(text, "untie_embeddings_and_output_weights ............. False", "untie_embeddings_and_output_weights ............. True");
  text = replaced(text, "add_bias_linear ................................. True", "add_bias_linear ................................. False");
  text = replaced(text, "hidden_dropout .................................. 0.1", "hidden_dropout .................................. 0.0");
  text = replaced(text, "attention_dropout ............................... 0.1", "attention_dropout ............................... 0.0");
  text = replaced(text, "attention_backend ............................... AttnBackend.auto", "attention_backend ............................... AttnBackend.unfused");
  text = replaced(text, "recompute_granularity ........................... full", "recompute_granularity ........................... selective");
  text = replaced(text, "recompute_method ................................ uniform", "recompute_method ................................ None");
  text = replaced(text, "virtual_pipeline_model_parallel_size ............ 2", "virtual_pipeline_model_parallel_size ............ None");
  text = replaced(text, "num_layers_per_virtual_pipeline_stage ........... 6", "num_layers_per_virtual_pipeline_stage ........... 3");
  const pc::MeasuredRun r = pc::read_megatron_log(write("llama-style.log", text), "h100", 2);
  EXPECT_EQ(r.name, "llama-style");
  EXPECT_EQ(r.virtual_stages, 4);  // 24 layers / (K 2 x 3)
  EXPECT_EQ(r.schedule, "interleaved-1f1b");
  EXPECT_EQ(r.recompute, "selective");
  EXPECT_EQ(r.model_text,
            "family: llm\nlayers: 24\nhidden: 2304\nffn_hidden: 9216\nheads: 24\nkv_heads: 8\nseq_len: 2048\n"
            "vocab: 50432\nmlp: swiglu\nnorm: rmsnorm\npositions: rotary\ntied_embeddings: false\nbias: false\n"
            "dropout: false\nflash_attention: false\nprecision: bf16\n");
}

TEST(MegatronLog, ErrorsNameTheFileAndTheArgument) {
  const std::string text = read(data("megatron-gpt-1.7b.log"));
  std::string path = write("no-hidden.log", replaced(text, "  hidden_size ..................................... 2304\n", ""));
  std::string e = error_of([&] { pc::read_megatron_log(path, "h100", 2); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("'hidden_size'"), std::string::npos) << e;

  path = write("bad-batch.log", replaced(text, "global_batch_size ............................... 64", "global_batch_size ............................... 6x4"));
  e = error_of([&] { pc::read_megatron_log(path, "h100", 2); });
  EXPECT_NE(e.find(path + ":"), std::string::npos) << e;  // FILE:LINE
  EXPECT_NE(e.find("'global_batch_size' must be an integer, got 6x4"), std::string::npos) << e;

  path = write("bad-time.log", replaced(text, "elapsed time per iteration (ms): 1399.4", "elapsed time per iteration (ms): nan"));
  e = error_of([&] { pc::read_megatron_log(path, "h100", 2); });
  EXPECT_NE(e.find(path + ":"), std::string::npos) << e;
  EXPECT_NE(e.find("iteration        6/     100"), std::string::npos) << e;

  // A GPT-style block cannot hold experts: family moe is SwiGLU, RMSNorm, rotary, without biases.
  path = write("moe.log", replaced(text, "num_experts ..................................... None", "num_experts ..................................... 8"));
  EXPECT_NE(error_of([&] { pc::read_megatron_log(path, "h100", 2); }).find("family moe"), std::string::npos);

  // Context parallelism reads as C beside Megatron-LM's data_parallel_size (which leaves C out).
  // The same 8 GPUs as T2 K2 C2 D1.
  path = write("cp.log", replaced(replaced(text, "context_parallel_size ........................... 1",
                                           "context_parallel_size ........................... 2"),
                                  "data_parallel_size .............................. 2",
                                  "data_parallel_size .............................. 1"));
  const pc::MeasuredRun cp = pc::read_megatron_log(path, "h100", 2);
  EXPECT_EQ(cp.context, 2);
  EXPECT_EQ(cp.data, 1);

  path = write("no-args.log", " iteration        1/     100 | elapsed time per iteration (ms): 10.0 |\n");
  e = error_of([&] { pc::read_megatron_log(path, "h100", 0); });
  EXPECT_NE(e.find("arguments"), std::string::npos) << e;

  e = error_of([] { pc::read_megatron_log("/nonexistent/run.log", "h100", 0); });
  EXPECT_NE(e.find("/nonexistent/run.log"), std::string::npos) << e;
}

// A mixture of experts' log (Megatron-LM's MoE arguments on the same run):
// family moe with its experts, top-k, widths, dense first blocks and head
// size, E and ETP 1 from the layout's arguments; the parameters as counted
// from those fields.
TEST(MegatronRun, ReadsAMixtureOfExperts) {
  std::string text = pipetwin::schedule::read_file(data("megatron-gpt-1.7b.log"));
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"num_experts ..................................... None", "num_experts ..................................... 8"},
           {"swiglu .......................................... False", "swiglu .......................................... True"},
           {"normalization ................................... LayerNorm", "normalization ................................... RMSNorm"},
           {"position_embedding_type ......................... learned_absolute", "position_embedding_type ......................... rope"},
           {"add_bias_linear ................................. True", "add_bias_linear ................................. False"}}) {
    text = replaced(text, from, to);
  }
  text = replaced(text, "  ffn_hidden_size ................................. 9216\n",
                  "  ffn_hidden_size ................................. 9216\n"
                  "  expert_model_parallel_size ...................... 2\n"
                  "  expert_tensor_parallel_size ..................... 1\n"
                  "  kv_channels ..................................... 128\n"
                  "  moe_ffn_hidden_size ............................. 1536\n"
                  "  moe_layer_freq .................................. ([0]*2+[1]*22)\n"
                  "  moe_router_topk ................................. 2\n"
                  "  moe_shared_expert_intermediate_size ............. 3072\n");
  const std::string path = write("moe-ok.log", text);
  const pc::MeasuredRun r = pc::read_megatron_log(path, "h100", 2);
  EXPECT_EQ(r.expert, 2);
  EXPECT_EQ(r.expert_tensor, 1);
  const auto m = pipetwin::models::model_from_text(r.model_text, path, "moe");
  EXPECT_EQ(m.family, "moe");
  pipetwin::models::MoeSpec spec;
  spec.llm.layers = 24, spec.llm.hidden = 2304, spec.llm.heads = 24, spec.llm.kv_heads = 24, spec.llm.seq_len = m.layers[1].shape.seq_len;
  spec.llm.vocab = m.layers.front().shape.vocab, spec.llm.ffn_hidden = 9216;
  spec.llm.tied_embeddings = m.layers.front().shape.tied;
  spec.experts = 8, spec.top_k = 2, spec.expert_ffn_hidden = 1536, spec.shared_experts = 2, spec.dense_layers = 2;
  spec.head_dim = 128;
  EXPECT_EQ(m.params(), pipetwin::models::moe_model(spec, pipetwin::models::Precision::BF16, "x").params());
  int dense = 0;
  for (const auto& l : m.layers) dense += l.kind == pipetwin::models::LayerKind::DecoderBlock;
  EXPECT_EQ(dense, 2);
  // A pattern other than dense-then-routed is refused, naming the field.
  const std::string odd = write("moe-odd.log", replaced(text, "([0]*2+[1]*22)", "([1,0]*12)"));
  EXPECT_NE(error_of([&] { pc::read_megatron_log(odd, "h100", 2); }).find("moe_layer_freq"), std::string::npos);
}

TEST(TorchtitanRun, ReadsTheJobFileAndTheMedianTps) {
  const pc::MeasuredRun r = pc::read_torchtitan_run(data("torchtitan-llama3-8b.toml"), data("torchtitan-llama3-8b.log"),
                                                    "examples/llama-3-8b.json", "h100", 2);
  EXPECT_EQ(r.name, "torchtitan-llama3-8b");
  EXPECT_EQ(r.model, "examples/llama-3-8b.json");
  EXPECT_TRUE(r.model_text.empty());
  EXPECT_EQ(r.hardware, "h100");
  EXPECT_EQ(r.tensor, 2);
  EXPECT_EQ(r.pipeline, 2);
  EXPECT_EQ(r.data, 4);  // dp_shard -1: the log's device mesh says 4
  EXPECT_EQ(r.gpus(), 16);
  EXPECT_EQ(r.schedule, "interleaved-1f1b");
  EXPECT_EQ(r.virtual_stages, 2);
  EXPECT_EQ(r.microbatch_size, 1);
  EXPECT_EQ(r.microbatches, 8);
  EXPECT_EQ(r.global_batch, 32);
  EXPECT_EQ(r.recompute, "uniform:1");
  EXPECT_TRUE(r.sequence_parallel);
  EXPECT_EQ(r.zero, 3);  // FSDP2 over dp_shard
  EXPECT_EQ(r.shard_group, 0);
  EXPECT_FALSE(r.reshard_after_forward);  // "default" under a pipeline: kept
  EXPECT_EQ(r.precision, "");
  // Steps 20..50 (the validation line left out): 3097 3105 | 3112 3121 tokens/s per GPU.
  const double tps = (3105.0 + 3112.0) / 2;
  EXPECT_NEAR(r.step_s, 32.0 * 8192 / (tps * 16), 1e-9);
  EXPECT_NEAR(r.step_s, 5.27071, 1e-5);
}

// Each edit of the job file: what the run then is, or the error.
TEST(TorchtitanRun, MapsSchedulesBatchesAndCheckpointing) {
  const std::string toml = read(data("torchtitan-llama3-8b.toml"));
  const std::string log = data("torchtitan-llama3-8b.log");
  const auto run = [&](const std::string& name, const std::string& text) {
    return pc::read_torchtitan_run(write(name, text), log, "m.yaml", "h100", 2);
  };
  const std::string ilv = "pipeline_parallel_schedule = \"Interleaved1F1B\"";
  EXPECT_EQ(run("zbv.toml", replaced(toml, ilv, "pipeline_parallel_schedule = \"ZBVZeroBubble\"")).schedule, "zb-v");
  EXPECT_EQ(run("dpv.toml", replaced(toml, ilv, "pipeline_parallel_schedule = \"DualPipeV\"")).schedule, "dualpipe-v");
  EXPECT_EQ(run("izb.toml", replaced(toml, ilv, "pipeline_parallel_schedule = \"InterleavedZeroBubble\"")).schedule, "interleaved-zb");
  const pc::MeasuredRun gpipe = run("gpipe.toml", replaced(toml, ilv, "pipeline_parallel_schedule = \"GPipe\""));
  EXPECT_EQ(gpipe.schedule, "gpipe");
  EXPECT_EQ(gpipe.virtual_stages, 1);
  const pc::MeasuredRun mb2 = run("mb2.toml", replaced(toml, "pipeline_parallel_microbatch_size = 1", "pipeline_parallel_microbatch_size = 2"));
  EXPECT_EQ(mb2.microbatch_size, 2);
  EXPECT_EQ(mb2.microbatches, 4);

  // No pipeline: gradient accumulation makes the micro-batches.
  std::string flat = replaced(toml, "pipeline_parallel_degree = 2", "pipeline_parallel_degree = 1");
  flat = replaced(flat, "data_parallel_shard_degree = -1", "data_parallel_shard_degree = 8");
  flat = replaced(flat, "seq_len = 8192", "seq_len = 8192\nglobal_batch_size = 256");
  const pc::MeasuredRun acc = run("acc.toml", flat);
  EXPECT_EQ(acc.data, 8);
  EXPECT_EQ(acc.schedule, "1f1b");
  EXPECT_EQ(acc.microbatch_size, 8);
  EXPECT_EQ(acc.microbatches, 4);  // 256 / (8 x 8)
  EXPECT_NEAR(acc.step_s, 256.0 * 8192 / ((3105.0 + 3112.0) / 2 * 16), 1e-9);
  EXPECT_EQ(acc.zero, 3);
  EXPECT_TRUE(acc.reshard_after_forward);  // "default" without a pipeline: freed after each forward
  // HSDP: shards over dp_shard, replicated over dp_replicate; float8 as a converter.
  std::string hsdp = replaced(flat, "data_parallel_shard_degree = 8", "data_parallel_shard_degree = 4");
  hsdp = replaced(hsdp, "data_parallel_replicate_degree = 1", "data_parallel_replicate_degree = 2");
  hsdp = replaced(hsdp, "# converters = [\"float8\"]", "converters = [\"float8\"]");
  const pc::MeasuredRun h = run("hsdp.toml", hsdp);
  EXPECT_EQ(h.data, 8);
  EXPECT_EQ(h.zero, 3);
  EXPECT_EQ(h.shard_group, 4);
  EXPECT_EQ(h.precision, "fp8");
  const std::string pp1 = "pipeline_parallel_degree = 1";
  EXPECT_FALSE(run("never.toml", replaced(flat, pp1, pp1 + "\nfsdp_reshard_after_forward = \"never\"")).reshard_after_forward);
  const std::string bad = error_of([&] { run("bad.toml", replaced(flat, pp1, pp1 + "\nfsdp_reshard_after_forward = \"sometimes\"")); });
  EXPECT_NE(bad.find("fsdp_reshard_after_forward must be default, always or never"), std::string::npos) << bad;

  const std::string full = "mode = \"full\"";
  EXPECT_EQ(run("none.toml", replaced(toml, full, "mode = \"none\"")).recompute, "none");
  const std::string sel1 = replaced(replaced(toml, full, "mode = \"selective\""), "selective_ac_option = \"op\"", "selective_ac_option = \"1\"");
  EXPECT_EQ(run("sel1.toml", sel1).recompute, "uniform:1");

  EXPECT_EQ(run("op.toml", replaced(toml, full, "mode = \"selective\"")).recompute, "op");  // torchtitan's per-operator policy
  std::string e = error_of([&] { run("sel2.toml", replaced(sel1, "selective_ac_option = \"1\"", "selective_ac_option = \"2\"")); });
  EXPECT_NE(e.find("every 2-th block"), std::string::npos) << e;
  // Context parallelism: each replica a group of 2, FSDP over the shards and the context ranks.
  const pc::MeasuredRun cp = run("cp.toml", replaced(toml, "context_parallel_degree = 1", "context_parallel_degree = 2"));
  EXPECT_EQ(cp.context, 2);
  EXPECT_EQ(cp.data, 4);
  EXPECT_EQ(cp.gpus(), 32);
  EXPECT_EQ(cp.zero, 3);
  e = error_of([&] { run("bfs.toml", replaced(toml, ilv, "pipeline_parallel_schedule = \"LoopedBFS\"")); });
  EXPECT_NE(e.find("bfs.toml:45"), std::string::npos) << e;
  EXPECT_NE(e.find("LoopedBFS"), std::string::npos) << e;
  e = error_of([&] { run("mb3.toml", replaced(toml, "pipeline_parallel_microbatch_size = 1", "pipeline_parallel_microbatch_size = 3")); });
  EXPECT_NE(e.find("pipeline_parallel_microbatch_size 3 must divide the local batch 8"), std::string::npos) << e;
  e = error_of([&] { run("str.toml", replaced(toml, "tensor_parallel_degree = 2", "tensor_parallel_degree = \"2\"")); });
  EXPECT_NE(e.find("str.toml:43: 'parallelism.tensor_parallel_degree' must be an integer"), std::string::npos) << e;
}

// The layout of late 2024: batch_size and the degrees under [training], the
// pipeline under [experimental]; a log whose mesh line lists its dimensions.
TEST(TorchtitanRun, ReadsTheOlderLayout) {
  const std::string toml = write("old.toml",
                                 "[training]\nbatch_size = 4\nseq_len = 2048\ndata_parallel_shard_degree = -1\n"
                                 "tensor_parallel_degree = 2\n[experimental]\npipeline_parallel_degree = 2\n"
                                 "pipeline_parallel_schedule = \"1f1b\"\npipeline_parallel_microbatches = 4\n"
                                 "[activation_checkpoint]\nmode = 'none'\n");
  const std::string log = write("old.log",
                                "[rank0]:2024-11-02 09:00:01,000 - root - INFO - Building 3-D device mesh with ['pp', 'dp_shard', 'tp'], [2, 2, 2]\n"
                                "[rank0]:2024-11-02 09:00:30,000 - root - INFO - \x1b[36mstep:  1  \x1b[32mloss: 10.8  \x1b[33mmemory: 20.1GiB(25.3%)  \x1b[34mtps: 900  \x1b[35mmfu: 5.00%\x1b[39m\n"
                                "[rank0]:2024-11-02 09:00:40,000 - root - INFO - \x1b[36mstep: 10  \x1b[32mloss:  9.8  \x1b[33mmemory: 20.1GiB(25.3%)  \x1b[34mtps: 12,000  \x1b[35mmfu: 40.00%\x1b[39m\n");
  const pc::MeasuredRun r = pc::read_torchtitan_run(toml, log, "m.yaml", "a100", 1);
  EXPECT_EQ(r.data, 2);
  EXPECT_EQ(r.tensor, 2);
  EXPECT_EQ(r.pipeline, 2);
  EXPECT_EQ(r.schedule, "1f1b");
  EXPECT_EQ(r.microbatches, 4);
  EXPECT_EQ(r.microbatch_size, 1);
  EXPECT_EQ(r.recompute, "none");
  EXPECT_NEAR(r.step_s, 4.0 * 2 * 2048 / (12000.0 * 8), 1e-12);

  const std::string no_mesh = write("no-mesh.log", "step: 1  loss: 1.0  tps: 10\nstep: 2  loss: 1.0  tps: 10\n");
  const std::string e = error_of([&] { pc::read_torchtitan_run(toml, no_mesh, "m.yaml", "a100", 0); });
  EXPECT_NE(e.find("old.toml:4"), std::string::npos) << e;
  EXPECT_NE(e.find("no-mesh.log"), std::string::npos) << e;
  EXPECT_NE(e.find("dp_shard"), std::string::npos) << e;

  const std::string bad = write("bad-tps.log", "[titan] step: 5  loss: 1.0  tps: n/a  mfu: 1%\n");
  const std::string e2 = error_of([&] { pc::read_torchtitan_run(data("torchtitan-llama3-8b.toml"), bad, "m", "h100", 0); });
  EXPECT_NE(e2.find("bad-tps.log:1"), std::string::npos) << e2;
  EXPECT_NE(e2.find("tps"), std::string::npos) << e2;
}

TEST(Toml, ReadsTheSubset) {
  const logs::TomlFile f = logs::TomlFile::parse(
      "top = 1\n[a]\ns = \"x # not a comment\" # a comment\nl = 'C:\\path'\ni = 1_000\nf = 3e-4\nb = true\n"
      "arr = [\"p\", 'q',\n  \"r\", # third\n]\n[a.b]\nx = -1\nt = {inline = 1}\n",
      "t.toml");
  EXPECT_EQ(f.integer("top"), 1);
  EXPECT_EQ(f.string("a.s"), "x # not a comment");
  EXPECT_EQ(f.string("a.l"), "C:\\path");
  EXPECT_EQ(f.integer("a.i"), 1000);
  EXPECT_DOUBLE_EQ(f.number("a.f"), 3e-4);
  EXPECT_DOUBLE_EQ(f.number("a.i"), 1000.0);
  EXPECT_TRUE(f.boolean("a.b"));
  EXPECT_EQ(f.strings("a.arr"), (std::vector<std::string>{"p", "q", "r"}));
  EXPECT_EQ(f.integer("a.b.x"), -1);
  EXPECT_EQ(f.where("a.b.x"), "t.toml:12");
  EXPECT_EQ(f.integer_or("a.missing", 7), 7);
  EXPECT_NE(error_of([&] { f.integer("a.b.t"); }).find("t.toml:13: 'a.b.t' must be an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { f.string("a.i"); }).find("t.toml:5"), std::string::npos);
  EXPECT_NE(error_of([] { logs::TomlFile::parse("[a]\nk = 1\nk = 2\n", "d.toml"); }).find("d.toml:3: 'a.k' is set twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { logs::TomlFile::parse("[a]\njust words\n", "w.toml"); }).find("w.toml:2"), std::string::npos);
  EXPECT_NE(error_of([] { logs::TomlFile::parse("a = [1,\n2\n", "u.toml"); }).find("u.toml:1"), std::string::npos);
}

TEST(Median, OddEvenAndSkip) {
  EXPECT_DOUBLE_EQ(logs::median_after({9, 3, 1, 2}, 1, "x", "p"), 2);
  EXPECT_DOUBLE_EQ(logs::median_after({9, 4, 1, 2}, 0, "x", "p"), 3);
  EXPECT_NE(error_of([] { logs::median_after({1}, 1, "tps", "run.log"); }).find("run.log: no tps values"), std::string::npos);
}

}  // namespace
