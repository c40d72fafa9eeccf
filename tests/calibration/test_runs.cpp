// calibrate --runs: the runs CSV (its fields, defaults and refusals), files
// told apart by content, the FLOPs formulas against their closed forms, and
// the fit closing its loop: runs that the twin itself predicts on a known
// device curve are fitted from another curve, and the known one comes back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "calibration/runs.hpp"
#include "schedule/error.hpp"
#include "twin/calibrate_runs.hpp"
#include "twin/predict.hpp"
#include "tests/support/errors.hpp"

namespace pc = pipetwin::calibration;
namespace pt = pipetwin::twin;

namespace {

const std::filesystem::path kDir = std::filesystem::temp_directory_path() / "pipetwin-test-runs";

std::string write(const std::string& name, const std::string& text) {
  std::filesystem::create_directories(kDir);
  const auto path = kDir / name;
  std::ofstream(path) << text;
  return path.string();
}

using pipetwin::test::error_of;

// A Llama-shaped model large enough for its matrix products to matter on a GPU.
std::string model_file() {
  return write("llm.yaml",
               "family: llm\nname: llm-test\nlayers: 8\nhidden: 2048\nffn_hidden: 5632\nheads: 16\nkv_heads: 8\n"
               "seq_len: 2048\nvocab: 32000\nmlp: swiglu\nnorm: rmsnorm\npositions: rotary\nprecision: bf16\n");
}

}  // namespace

TEST(RunsCsv, FieldsDefaultsAndRelativePaths) {
  model_file();
  const auto path = write("runs.csv",
                          "# published runs\n"
                          "name,model,hardware,tensor,pipeline,gpus,virtual,microbatch_size,global_batch,recompute,"
                          "sequence_parallel,partition,tflops_per_gpu,formula,role\n"
                          "a,llm.yaml,h100,2,2,16,2,1,64,selective,1,uniform,400,megatron-no-recompute,fit\n"
                          "b,llm.yaml,h100,1,1,8,,2,64,,0,,380,model,\n");
  const auto runs = pc::read_runs_csv(path);
  ASSERT_EQ(runs.size(), 2u);
  const auto& a = runs[0];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.model, (kDir / "llm.yaml").string());  // relative to the CSV
  EXPECT_EQ(a.hardware, "h100");
  EXPECT_EQ(a.tensor, 2);
  EXPECT_EQ(a.pipeline, 2);
  EXPECT_EQ(a.data, 4);          // gpus / (T K)
  EXPECT_EQ(a.microbatches, 16);  // 64 / (4 replicas x 1)
  EXPECT_EQ(a.schedule, "interleaved-1f1b");
  EXPECT_EQ(a.recompute, "selective");
  EXPECT_TRUE(a.sequence_parallel);
  EXPECT_EQ(a.formula, pc::FlopsFormula::MegatronNoRecompute);
  EXPECT_EQ(a.partition, "uniform");
  EXPECT_EQ(a.role, "fit");
  EXPECT_EQ(a.source, path + ":3");
  const auto& b = runs[1];
  EXPECT_EQ(b.data, 8);
  EXPECT_EQ(b.microbatches, 4);
  EXPECT_EQ(b.schedule, "1f1b");
  EXPECT_EQ(b.recompute, "none");
  EXPECT_EQ(b.role, "");
  EXPECT_EQ(b.gpus(), 8);
}

TEST(RunsCsv, ErrorsNameTheFileLineAndColumn) {
  const auto refused = [](const std::string& text) { return error_of([&] { pc::read_runs_csv(write("bad.csv", text)); }); };
  EXPECT_NE(refused("model,hardware,speed\n").find("bad.csv:1: unknown column 'speed'"), std::string::npos);
  EXPECT_NE(refused("name,hardware,step_s\n").find("no column 'model'"), std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatches\nm,h100,4\n").find("bad.csv:2: give one of 'step_s' and 'tflops_per_gpu'"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,tensor,microbatches,step_s\nm,h100,two,4,1\n").find("bad.csv:2: column 'tensor': 'two'"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,data,gpus,microbatches,step_s\nm,h100,2,4,4,1\n").find("not both"), std::string::npos);
  EXPECT_NE(refused("model,hardware,pipeline,gpus,microbatches,step_s\nm,h100,3,4,4,1\n").find("not a multiple"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatch_size,global_batch,step_s\nm,h100,2,5,1\n").find("does not split"), std::string::npos);
  EXPECT_NE(refused("model,hardware,step_s\nm,h100,1\n").find("give 'microbatches' or 'global_batch'"), std::string::npos);
  EXPECT_NE(refused("name,model,hardware,microbatches,step_s\nx,m,h100,4,1\nx,m,h100,4,2\n").find("name 'x' is also"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatches,step_s,role\nm,h100,4,1,train\n").find("column 'role': 'train'"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatches,step_s\nm,h100,4,-1\n").find("not a positive number"), std::string::npos);
  EXPECT_NE(refused("# nothing\n").find("no header row"), std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatches,step_s,zero\nm,h100,4,1,4\n").find("bad.csv:2: column 'zero': '4'"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatches,step_s,zero,zero1\nm,h100,4,1,3,1\n").find("'zero1' and 'zero', not both"),
            std::string::npos);
  EXPECT_NE(refused("model,hardware,microbatches,step_s,precision\nm,h100,4,1,fp4\n").find("column 'precision': 'fp4'"),
            std::string::npos);
  // ZeRO's stage and the precision, read as given.
  const auto ok = pc::read_runs_csv(write("ok.csv", "model,hardware,data,microbatches,step_s,zero,precision\nm,h100,8,4,1,3,fp8\n"));
  EXPECT_EQ(ok.at(0).zero, 3);
  EXPECT_EQ(ok.at(0).precision, "fp8");
}

TEST(RunsFiles, AMegatronLogIsToldFromACsvByItsContent) {
  const std::string log = std::string(PIPETWIN_CALIBRATION_DATA_DIR) + "/megatron-gpt-1.7b.log";
  const auto runs = pc::read_runs(log, "selene");
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].hardware, "selene");
  EXPECT_FALSE(runs[0].model_text.empty());
  EXPECT_GT(runs[0].step_s, 0);
  EXPECT_NE(error_of([&] { pc::read_runs(log, ""); }).find("give --hardware"), std::string::npos);
}

TEST(RunsFlops, TheFormulasFollowTheirClosedForms) {
  // Narayanan et al.'s GPT (GELU, f = 4h): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
  const auto gpt = write("gpt.yaml",
                         "family: llm\nname: gpt\nlayers: 24\nhidden: 2304\nffn_hidden: 9216\nheads: 24\nseq_len: 2048\n"
                         "vocab: 51200\nmlp: gelu\nnorm: layernorm\npositions: learned\ntied_embeddings: true\nbias: true\n"
                         "dropout: true\nprecision: bf16\n");
  pc::MeasuredRun r;
  r.model = gpt, r.global_batch = 512, r.tflops_per_gpu = 1;
  const double B = 512, s = 2048, l = 24, h = 2304, V = 51200;
  const double narayanan = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  // The biases' and norms' FLOPs are left out of the closed form: within 0.1%.
  EXPECT_NEAR(pt::run_flops(r) / narayanan, 1.0, 1e-3);
  r.formula = pc::FlopsFormula::MegatronNoRecompute;
  EXPECT_NEAR(pt::run_flops(r) / (narayanan - 24 * B * s * l * h * h * (1 + s / (6 * h))), 1.0, 1e-3);
}

// The loop closed: "measured" steps are the twin's own on a known curve.
TEST(CalibrateRuns, FindsTheCurveThatMadeTheRuns) {
  const auto model = model_file();
  const auto truth = write("truth.yaml",
                           "preset: h100\ndevice:\n  efficiency: {max: 0.45, half_flops: 1e10}\n  memory_efficiency: 0.6\n");
  struct Shape {
    const char* name;
    int T, K, M, b;
    const char* recompute;
    bool fit;
  };
  const Shape shapes[] = {{"k1", 1, 1, 4, 1, "none", true},         {"t2k2", 2, 2, 8, 1, "none", true},
                          {"k4", 1, 4, 8, 2, "selective", true},    {"t4", 4, 1, 4, 2, "none", false},
                          {"k2-uniform", 1, 2, 8, 1, "uniform:1", false}, {"t2k4", 2, 4, 16, 1, "full", false}};
  pt::RunsFitRequest q;
  for (const auto& s : shapes) {
    pc::MeasuredRun r;
    r.name = s.name, r.source = "test", r.model = model, r.hardware = "h100";
    r.tensor = s.T, r.pipeline = s.K, r.microbatches = s.M, r.microbatch_size = s.b, r.global_batch = s.M * s.b;
    r.recompute = s.recompute, r.role = s.fit ? "fit" : "predict";
    r.partition = "uniform";  // as the framework split it: the same in the fit
    pt::ScenarioSpec spec;
    spec.model = model, spec.hardware = truth, spec.schedule = "1f1b", spec.ranks = s.K, spec.microbatches = s.M;
    spec.batch = s.M * s.b, spec.recompute = s.recompute, spec.tensor_parallel = s.T, spec.partition = "uniform";
    const auto sc = pt::build_scenario(spec);
    r.step_s = pt::summarize(*sc, pt::predict(*sc, pt::Engine::Auto)).step_time_s;
    q.runs.push_back(r);
  }
  q.jobs = 2;
  const auto f = pt::calibrate_runs(q);
  std::printf("%s", pt::runs_fit_text(f).c_str());
  // Each run kept its partition through the fit: the curve comes back exactly.
  EXPECT_NEAR(f.max, 0.45, 0.45 * 0.002);
  EXPECT_DOUBLE_EQ(f.half_flops, 1e10);
  EXPECT_NEAR(f.memory_efficiency, 0.6, 0.6 * 0.005);
  EXPECT_LT(f.worst_error, 0.002);
  EXPECT_LT(f.worst_loo_error, 0.03);
  ASSERT_EQ(f.runs.size(), 6u);
  EXPECT_TRUE(f.runs[0].fitted);
  EXPECT_FALSE(f.runs[3].fitted);
  const auto j = pt::runs_fit_json(f);
  EXPECT_EQ(j["runs"].size(), 6u);
  EXPECT_EQ(j["runs"][3]["role"], "predict");
  // Refusals name what is wrong.
  q.fit = {"k9"};
  EXPECT_NE(error_of([&] { pt::calibrate_runs(q); }).find("--fit names run 'k9'"), std::string::npos);
  q.fit.clear();
  for (auto& r : q.runs) r.role.clear();
  EXPECT_NE(error_of([&] { pt::calibrate_runs(q); }).find("no run is fitted"), std::string::npos);
  q.runs[1].hardware = "a100";
  q.fit = {"k1"};
  EXPECT_NE(error_of([&] { pt::calibrate_runs(q); }).find("fits one hardware's device"), std::string::npos);
}

// --fit-attention: runs at two sequence lengths, made on a device whose
// attention kernel runs at 0.7 times the base file's rates, give back that
// factor beside the curve; a base without rates is refused.
TEST(CalibrateRuns, FindsTheAttentionRatesThatMadeTheRuns) {
  const auto rates = [](double x) {
    char text[512];
    std::snprintf(text, sizeof text,
                  "  attention:\n    forward: [[1024, %g], [8192, %g]]\n    forward_causal: [[1024, %g], [8192, %g]]\n"
                  "    backward: [[1024, %g], [8192, %g]]\n",
                  350 * x, 370 * x, 260 * x, 333 * x, 260 * x, 318 * x);
    return std::string(text);
  };
  const auto base = write("flash.yaml", "preset: h100\ndevice:\n" + rates(1));
  const auto truth = write("flash-truth.yaml", "preset: h100\ndevice:\n  efficiency: {max: 0.45, half_flops: 1e10}\n"
                                               "  memory_efficiency: 0.6\n" + rates(0.7));
  const std::string shape = "family: llm\nlayers: 8\nhidden: 2048\nffn_hidden: 5632\nheads: 16\nkv_heads: 8\nvocab: 32000\n"
                            "mlp: swiglu\nnorm: rmsnorm\npositions: rotary\nprecision: bf16\n";
  const auto short_seq = write("llm-2k.yaml", shape + "name: llm-2k\nseq_len: 2048\n");
  const auto long_seq = write("llm-16k.yaml", shape + "name: llm-16k\nseq_len: 16384\n");
  struct Shape {
    const char* name;
    const std::string* model;
    int T, K, M;
    bool fit;
  };
  const Shape shapes[] = {{"2k-k1", &short_seq, 1, 1, 4, true},  {"2k-t2k2", &short_seq, 2, 2, 8, true},
                          {"16k-k1", &long_seq, 1, 1, 2, true},  {"16k-t2k2", &long_seq, 2, 2, 4, true},
                          {"2k-k4", &short_seq, 1, 4, 8, false}, {"16k-t4", &long_seq, 4, 1, 2, false}};
  pt::RunsFitRequest q;
  for (const auto& s : shapes) {
    pc::MeasuredRun r;
    r.name = s.name, r.source = "test", r.model = *s.model, r.hardware = base;
    r.tensor = s.T, r.pipeline = s.K, r.microbatches = s.M, r.microbatch_size = 1, r.global_batch = s.M;
    r.recompute = "none", r.role = s.fit ? "fit" : "predict", r.partition = "uniform";
    pt::ScenarioSpec spec;
    spec.model = *s.model, spec.hardware = truth, spec.schedule = "1f1b", spec.ranks = s.K, spec.microbatches = s.M;
    spec.batch = s.M, spec.recompute = "none", spec.tensor_parallel = s.T, spec.partition = "uniform";
    const auto sc = pt::build_scenario(spec);
    r.step_s = pt::summarize(*sc, pt::predict(*sc, pt::Engine::Auto)).step_time_s;
    q.runs.push_back(r);
  }
  q.jobs = 2;
  q.fit_attention = true;
  const auto f = pt::calibrate_runs(q);
  std::printf("%s", pt::runs_fit_text(f).c_str());
  EXPECT_NEAR(f.attention_scale, 0.7, 0.7 * 0.005);
  EXPECT_NEAR(f.max, 0.45, 0.45 * 0.005);
  EXPECT_DOUBLE_EQ(f.half_flops, 1e10);
  EXPECT_LT(f.worst_error, 0.005);
  EXPECT_NEAR(f.hardware.device.attention.forward_causal.back().second, 0.7 * 333e12, 333e12 * 0.005);
  EXPECT_NE(pt::runs_fit_text(f).find("attention rates x 0.7"), std::string::npos);
  // Without fitting them, the rates' error lands on the curve.
  q.fit_attention = false;
  EXPECT_GT(pt::calibrate_runs(q).worst_error, 0.005);
  q.fit_attention = true;
  for (auto& r : q.runs) r.hardware = "h100";
  EXPECT_NE(error_of([&] { pt::calibrate_runs(q); }).find("gives no fused attention kernel's rates"), std::string::npos);
}
