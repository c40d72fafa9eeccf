// The llm family: parameter counts of published models from their Hugging
// Face config.json, FLOPs and stashes against closed forms, spec errors, and
// the memory closed forms of Korthikanti et al. 2022 against the paper's
// table and against Megatron-LM's theoretical_memory_usage.py, written out
// again here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <optional>
#include <string>

#include "models/families.hpp"
#include "models/llm_memory.hpp"
#include "tests/models/megatron_memory.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "tests/support/errors.hpp"

namespace pm = pipetwin::models;
using pipetwin::testing::MegatronArgs;
using pipetwin::testing::megatron_activation;
using pipetwin::testing::megatron_activation_without_sp;
using pipetwin::testing::megatron_weight_and_optimizer;

namespace {

std::string data(const std::string& name) { return std::string(PIPETWIN_MODELS_DATA_DIR) + "/" + name; }

std::string write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("pipetwin_test_llm_" + name);
  std::ofstream(path) << text;
  return path.string();
}

using pipetwin::test::error_of;

// Narayanan et al.'s GPT: GELU, LayerNorm, learned positions, tied, biases, dropout.
pm::LlmSpec gpt(std::int64_t layers, std::int64_t h, std::int64_t heads, std::int64_t s, std::int64_t vocab = 51200) {
  pm::LlmSpec t;
  t.layers = layers, t.hidden = h, t.ffn_hidden = 4 * h, t.heads = heads, t.seq_len = s, t.vocab = vocab;
  t.mlp = pm::LlmSpec::Mlp::Gelu;
  t.norm = pm::LlmSpec::Norm::LayerNorm;
  t.positions = pm::LlmSpec::Positions::Learned;
  t.tied_embeddings = t.bias = t.dropout = true;
  return t;
}

}  // namespace

// ---- Parameter counts from config.json -------------------------------------------------------

TEST(HfConfig, PublishedParameterCounts) {
  struct Case {
    std::string path;
    std::int64_t exact;    // as Hugging Face's model.num_parameters() counts them
    double published_b;    // the model card's figure, in billions
    double precision_b;    // half a unit of its last digit
  };
  for (const Case& c : {Case{data("llama-2-7b.json"), 6'738'415'616, 6.74, 0.005},
                        Case{std::string(PIPETWIN_EXAMPLES_DIR) + "/llama-3-8b.json", 8'030'261'248, 8.03, 0.005},
                        Case{data("llama-3-70b.json"), 70'553'706'496, 70.6, 0.05},
                        Case{data("mistral-7b.json"), 7'241'732'096, 7.24, 0.005},
                        Case{data("qwen2-7b.json"), 7'615'616'512, 7.62, 0.005},
                        Case{data("gpt2.json"), 124'439'808, 0.124, 0.0005}}) {
    const auto m = pm::load_model(c.path);
    std::printf("%-16s %16lld parameters (%.3f B)\n", m.name.c_str(), static_cast<long long>(m.params()), m.params() / 1e9);
    EXPECT_EQ(m.family, "llm");
    EXPECT_EQ(m.params(), c.exact) << c.path;
    EXPECT_NEAR(m.params() / 1e9, c.published_b, c.precision_b) << c.path;
  }
}

TEST(HfConfig, Gpt2IsGptStyleAndTied) {
  const auto c = pm::parse_hf_config(pipetwin::schedule::read_file(data("gpt2.json")), "gpt2.json");
  EXPECT_EQ(c.architecture, "GPT2LMHeadModel");
  EXPECT_EQ(c.spec.ffn_hidden, 4 * 768);  // n_inner absent
  EXPECT_EQ(c.spec.seq_len, 1024);        // 2048 clipped to n_positions
  EXPECT_TRUE(c.spec.tied_embeddings);
  EXPECT_TRUE(c.spec.dropout);
  const auto m = pm::load_model(data("gpt2.json"));
  EXPECT_EQ(m.layers.size(), 14u);
  EXPECT_EQ(m.layers.back().kind, pm::LayerKind::LlmHead);
  EXPECT_EQ(m.layers.back().cost.params, 2 * 768);  // the final LayerNorm: the head is tied
  EXPECT_DOUBLE_EQ(m.layers.back().cost.forward_flops, 2.0 * 1024 * 768 * 50257);  // it still computes
  EXPECT_EQ(m.layers[1].cost.params, 7'087'872);
}

TEST(HfConfig, SequenceLengthAndPrecision) {
  const auto c = pm::parse_hf_config(pipetwin::schedule::read_file(data("qwen2-7b.json")), "qwen2-7b.json");
  EXPECT_EQ(c.spec.seq_len, 2048);  // 2048 under 131072 positions
  EXPECT_EQ(c.spec.kv(), 512);
  EXPECT_TRUE(c.spec.qkv_bias);
  EXPECT_EQ(c.precision, pm::Precision::BF16);
  const auto llama2 = pm::load_model(data("llama-2-7b.json"));
  EXPECT_EQ(llama2.precision, pm::Precision::FP16);
  EXPECT_EQ(llama2.name, "llama-2-7b");
  const auto p = write_temp("seq.json", R"({"architectures": ["MistralForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
      "max_position_embeddings": 4096, "pipetwin_seq_len": 512})");
  EXPECT_EQ(pm::load_model(p).layers[1].shape.seq_len, 512);
}

TEST(HfConfig, ErrorsNameTheFileAndTheField) {
  const auto bad = write_temp("bad.json", R"({"architectures": ["BertForMaskedLM"], "hidden_size": 768})");
  const std::string unknown = error_of([&] { pm::load_model(bad); });
  EXPECT_NE(unknown.find(bad), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("field 'architectures'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("BertForMaskedLM"), std::string::npos) << unknown;
  for (const char* kind : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "GPT2LMHeadModel"}) {
    EXPECT_NE(unknown.find(kind), std::string::npos) << unknown;
  }
  const auto malformed = write_temp("malformed.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": )");
  const std::string m = error_of([&] { pm::load_model(malformed); });
  EXPECT_NE(m.find(malformed + ": not valid JSON"), std::string::npos) << m;
  const auto missing = write_temp("missing.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})");
  EXPECT_NE(error_of([&] { pm::load_model(missing); }).find("field 'intermediate_size': missing"), std::string::npos);
  const auto gqa = write_temp("gqa.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 100, "max_position_embeddings": 64})");
  EXPECT_NE(error_of([&] { pm::load_model(gqa); }).find("field 'num_key_value_heads': must divide"), std::string::npos);
  const auto act = write_temp("act.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 64, "hidden_act": "relu"})");
  EXPECT_NE(error_of([&] { pm::load_model(act); }).find("field 'hidden_act'"), std::string::npos);
}

TEST(HfConfig, TheTextOfATraceReadsBack) {
  // A trace keeps its model file's text: a config.json reads back as the same model.
  const std::string text = pipetwin::schedule::read_file(data("llama-2-7b.json"));
  EXPECT_TRUE(pm::looks_like_hf_config(text));
  EXPECT_EQ(pm::model_from_text(text, "trace", "llama-2-7b").params(), 6'738'415'616);
  EXPECT_FALSE(pm::looks_like_hf_config("family: llm\n"));
}

// ---- The YAML family --------------------------------------------------------------------------

TEST(LlmFamily, YamlSpecAndItsErrors) {
  const auto m = pm::load_model(std::string(PIPETWIN_EXAMPLES_DIR) + "/gpt-1.7b.yaml");
  EXPECT_EQ(m.family, "llm");
  EXPECT_EQ(m.precision, pm::Precision::BF16);
  EXPECT_NEAR(m.params() / 1e9, 1.7, 0.05);  // Narayanan et al.'s 1.7 B
  const std::string base = "family: llm\nlayers: 2\nhidden: 64\nffn_hidden: 128\nseq_len: 16\nvocab: 100\n";
  const auto expect_error = [&](const std::string& extra, const std::string& what) {
    const auto p = write_temp("spec.yaml", base + extra);
    const std::string e = error_of([&] { pm::load_model(p); });
    EXPECT_NE(e.find(what), std::string::npos) << extra << " -> " << e;
  };
  expect_error("heads: 6\n", "field 'heads': must divide hidden (64)");
  expect_error("heads: 8\nkv_heads: 3\n", "field 'kv_heads': must divide heads (8)");
  expect_error("heads: 8\nmlp: relu\n", "field 'mlp': unknown value 'relu' (valid: swiglu, gelu)");
  expect_error("heads: 8\nbias: maybe\n", "field 'bias': expected true or false");
  expect_error("heads: 8\nflash_attention: often\n", "field 'flash_attention': expected true or false");
  const auto p = write_temp("scores.yaml", base + "heads: 8\nflash_attention: false\n");
  EXPECT_FALSE(pm::load_model(p).layers[1].shape.flash_attention);
  expect_error("heads: 8\nmax_positions: 32\n", "field 'max_positions': only a learned position table");
  expect_error("heads: 8\npositions: learned\nmax_positions: 8\n", "field 'max_positions': must be at least seq_len");
  expect_error("heads: 8\nwidth: 3\n", "width");
}

TEST(LlmFamily, FlopsFollowTheClosedForm) {
  for (const auto mlp : {pm::LlmSpec::Mlp::SwiGlu, pm::LlmSpec::Mlp::Gelu}) {
    for (const std::int64_t kv_heads : {8, 2, 1}) {
      pm::LlmSpec t;
      t.layers = 3, t.hidden = 256, t.ffn_hidden = 688, t.heads = 8, t.kv_heads = kv_heads, t.seq_len = 128, t.vocab = 1000;
      t.mlp = mlp;
      const auto m = pm::llm_model(t, pm::Precision::BF16, "t");
      const double s = 128, h = 256, f = 688, kv = 256.0 * kv_heads / 8, V = 1000;
      const double matrices = h * h + 2 * h * kv + h * h + (mlp == pm::LlmSpec::Mlp::SwiGlu ? 3 : 2) * h * f;
      for (int b = 1; b <= 3; ++b) {
        const auto& c = m.layers[b].cost;
        EXPECT_EQ(m.layers[b].kind, pm::LayerKind::DecoderBlock);
        EXPECT_DOUBLE_EQ(c.forward_flops, 2 * s * matrices + 4 * s * s * h);
        EXPECT_DOUBLE_EQ(c.input_grad_flops, 2 * s * matrices + 8 * s * s * h);
        EXPECT_DOUBLE_EQ(c.weight_grad_flops, 2 * s * matrices);
        EXPECT_EQ(c.params, static_cast<std::int64_t>(matrices) + 2 * 256);  // two RMSNorms
        EXPECT_EQ(c.output_elems, 128 * 256);
      }
      EXPECT_DOUBLE_EQ(m.layers.back().cost.forward_flops, 2 * s * h * V);
      EXPECT_DOUBLE_EQ(m.layers.back().cost.weight_grad_flops, 2 * s * h * V);
      EXPECT_EQ(m.layers.front().cost.params, 1000 * 256);
      EXPECT_EQ(m.layers.back().cost.params, 256 + 1000 * 256);
    }
  }
}

TEST(LlmFamily, GptBlockStashesKorthikantis34sh) {
  // GELU, LayerNorm, f = 4h, kv = h, dropout, flash attention: 34·s·h bytes in 16-bit.
  for (const auto& t : {gpt(2, 768, 12, 1024), gpt(2, 12288, 96, 2048), gpt(1, 64, 4, 7)}) {
    for (const auto precision : {pm::Precision::BF16, pm::Precision::FP16}) {
      const auto m = pm::llm_model(t, precision, "gpt");
      EXPECT_EQ(m.layers[1].cost.stashed_elems * 2, 34 * t.seq_len * t.hidden);
      EXPECT_EQ(m.layers[0].cost.stashed_elems * 2, t.seq_len * t.hidden);  // the embedding's dropout mask
      // Section 4.3: final norm and head inputs, fp32 logits: 4sh(1 + V/h) bytes.
      EXPECT_EQ(m.layers.back().cost.stashed_elems * 2, 4 * t.seq_len * t.hidden + 4 * t.seq_len * t.vocab);
    }
    // In fp32 the 16h activations take 4 bytes each, the 2h mask bytes stay bytes.
    EXPECT_EQ(pm::llm_model(t, pm::Precision::FP32, "gpt").layers[1].cost.stashed_elems * 4,
              (16 * 4 + 2) * t.seq_len * t.hidden);
  }
  // Llama-style: no dropout, SwiGLU's three f-wide tensors, GQA's narrower K and V.
  pm::LlmSpec t;
  t.layers = 1, t.hidden = 4096, t.ffn_hidden = 14336, t.heads = 32, t.kv_heads = 8, t.seq_len = 8192, t.vocab = 128256;
  const std::int64_t s = 8192, h = 4096, f = 14336, kv = 1024;
  EXPECT_EQ(pm::llm_model(t, pm::Precision::BF16, "l").layers[1].cost.stashed_elems, s * (4 * h + h + 2 * kv + h + 3 * f));
}

// Without flash attention a block also stashes the attention core: the
// paper's sbh(34 + 5as/h) bytes in 16-bit.
TEST(LlmFamily, WithoutFlashAttentionTheScoresAreStashed) {
  for (auto t : {gpt(2, 768, 12, 1024), gpt(2, 12288, 96, 2048)}) {
    t.flash_attention = false;
    const auto m = pm::llm_model(t, pm::Precision::BF16, "gpt");
    EXPECT_EQ(m.layers[1].cost.stashed_elems * 2,
              34 * t.seq_len * t.hidden + 5 * t.heads * t.seq_len * t.seq_len);
    EXPECT_EQ(m.layers[1].cost.tp_replicated_elems * 2, 10 * t.seq_len * t.hidden);  // the scores split over T
    EXPECT_FALSE(m.layers[1].shape.flash_attention);
    // In fp32: 4-byte activations and scores, 1-byte masks: (16·4 + 2)·s·h + (2·4 + 1)·a·s².
    EXPECT_EQ(pm::llm_model(t, pm::Precision::FP32, "gpt").layers[1].cost.stashed_elems * 4,
              66 * t.seq_len * t.hidden + 9 * t.heads * t.seq_len * t.seq_len);
  }
}

// The elementwise traffic per token, in bytes (bf16), written out from the
// kernels' reads and writes (models/family_llm.cpp's header).
TEST(LlmFamily, ElementwiseTrafficFollowsTheKernels) {
  for (const bool flash : {true, false}) {
    auto t = gpt(2, 768, 12, 1024);
    t.flash_attention = flash;
    const double s = 1024, h = 768, a = 12, V = 51200;
    const auto m = pm::llm_model(t, pm::Precision::BF16, "gpt");
    const auto& c = m.layers[1].cost;
    // GPT: norms 8h, two bias-dropout-adds 2·(6h + h), GELU 2·2·4h; scores 13 bytes each.
    EXPECT_DOUBLE_EQ(c.forward_traffic_replicated, s * 22 * h);
    EXPECT_DOUBLE_EQ(c.forward_traffic, s * (22 * h + 16 * h + (flash ? 0 : 13 * a * s)));
    // Backward: norms 12h, residual sums 12h, dropouts 2·5h; GELU 3·2·4h; scores 17 bytes each.
    EXPECT_DOUBLE_EQ(c.backward_traffic_replicated, s * 34 * h);
    EXPECT_DOUBLE_EQ(c.backward_traffic, s * (34 * h + 24 * h + (flash ? 0 : 17 * a * s)));
    // Embedding: rows 2h, positions 6h, dropout 5h; backward 6h + 5h; all whole.
    EXPECT_DOUBLE_EQ(m.layers[0].cost.forward_traffic, s * 13 * h);
    EXPECT_DOUBLE_EQ(m.layers[0].cost.forward_traffic_replicated, s * 13 * h);
    EXPECT_DOUBLE_EQ(m.layers[0].cost.backward_traffic, s * 11 * h);
    // Head: the final norm whole; the cross-entropy's 6 bytes a logit each way, split.
    const auto& hd = m.layers.back().cost;
    EXPECT_DOUBLE_EQ(hd.forward_traffic, s * (4 * h + 6 * V));
    EXPECT_DOUBLE_EQ(hd.backward_traffic, s * (6 * h + 6 * V));
    EXPECT_DOUBLE_EQ(hd.backward_traffic_replicated, s * 6 * h);
  }
  // Llama: RMSNorms 8h, residual adds 12h (no dropout); SwiGLU 3f, rotary on Q and K 2(h + kv), in bf16.
  pm::LlmSpec t;
  t.layers = 1, t.hidden = 4096, t.ffn_hidden = 14336, t.heads = 32, t.kv_heads = 8, t.seq_len = 8192, t.vocab = 128256;
  const double s = 8192, h = 4096, f = 14336, kv = 1024;
  const auto llama = pm::llm_model(t, pm::Precision::BF16, "l");
  const auto& c = llama.layers[1].cost;
  EXPECT_DOUBLE_EQ(c.forward_traffic, s * (20 * h + 6 * f + 4 * (h + kv)));
  EXPECT_DOUBLE_EQ(c.backward_traffic, s * (24 * h + 10 * f + 4 * (h + kv)));
  EXPECT_DOUBLE_EQ(c.backward_traffic_replicated, s * 24 * h);
}

// ---- Memory: Korthikanti et al. 2022, Table 2 -------------------------------------------------

TEST(LlmMemory, EveryPolicyMatchesThePapersTable) {
  struct Shape {
    std::int64_t layers, h, heads, s;
  };
  // GPT-3 175B, the paper's 22B, and a small one.
  for (const Shape& shape : {Shape{96, 12288, 96, 2048}, Shape{48, 6144, 64, 2048}, Shape{12, 768, 12, 1024}}) {
    const auto spec = gpt(shape.layers, shape.h, shape.heads, shape.s);
    for (const std::int64_t b : {1, 4}) {
      for (const int T : {1, 2, 8}) {
        for (const bool sp : {false, true}) {
          for (const auto rc : {pm::LlmRecompute::None, pm::LlmRecompute::Selective, pm::LlmRecompute::Full}) {
            for (const bool flash : {false, true}) {
              pm::LlmParallel par;
              par.tensor = T, par.micro_batch = b, par.sequence_parallel = sp, par.recompute = rc, par.flash_attention = flash;
              const double s = static_cast<double>(shape.s), h = static_cast<double>(shape.h),
                           a = static_cast<double>(shape.heads), sbh = s * static_cast<double>(b) * h;
              // The 5as/h term: kept only without recompute and without flash attention.
              const double core = rc == pm::LlmRecompute::None && !flash ? 5 * a * s / h : 0;
              double expected = 0;
              if (rc == pm::LlmRecompute::Full) {
                expected = sp ? 2 * sbh / T : 2 * sbh;
              } else if (sp) {
                expected = sbh / T * (34 + core);
              } else {
                expected = sbh * (10 + 24.0 / T + core / T);
              }
              const double got = pm::llm_layer_activation_bytes(spec, par);
              EXPECT_NEAR(got, expected, 1e-9 * expected) << "h " << h << " b " << b << " T " << T << " sp " << sp
                                                            << " recompute " << static_cast<int>(rc) << " flash " << flash;
            }
          }
        }
      }
    }
  }
}

TEST(LlmMemory, FirstStageHoldsLLayersAndInterleavingAddsThePapersFactor) {
  const auto spec = gpt(96, 12288, 96, 2048);
  for (const int K : {1, 2, 4, 8}) {
    for (const int V : {1, 2, 3}) {
      if (spec.layers % (K * V) != 0) continue;
      pm::LlmParallel par;
      par.tensor = 8, par.pipeline = K, par.virtual_stages = V, par.sequence_parallel = true;
      par.recompute = pm::LlmRecompute::Selective;
      const auto first = pm::llm_rank_memory(spec, par, 0);
      const double factor = V == 1 ? 1 : 1 + (K - 1.0) / (K * V);
      EXPECT_NEAR(first.layers_in_flight, 96 * factor, 1e-9);
      const double sbh = 2048.0 * 12288;
      // Section 4.3: the embedding's dropout mask sbh/T per micro-batch in flight;
      // the output layer 4sbh/T·(1 + V/h) only when the first stage is also the last.
      EXPECT_NEAR(first.embedding_activation_bytes, sbh / 8 * K * factor, 1e-6);
      EXPECT_NEAR(first.output_activation_bytes, K == 1 ? 4 * sbh / 8 * (1 + 51200.0 / 12288) : 0, 1e-3);
      EXPECT_NEAR(first.activation_bytes,
                  sbh * 34 / 8 * 96 * factor + first.embedding_activation_bytes + first.output_activation_bytes,
                  1e-9 * first.activation_bytes);
      if (K > 1 && V == 1) {
        const auto last = pm::llm_rank_memory(spec, par, K - 1);
        EXPECT_NEAR(last.layers_in_flight, 96.0 / K, 1e-9);  // one micro-batch in flight
      }
    }
  }
  pm::LlmParallel few;
  few.pipeline = 8, few.microbatches = 3;
  EXPECT_NEAR(pm::llm_rank_memory(spec, few, 0).layers_in_flight, 3 * 96 / 8.0, 1e-9);  // M < K
  pm::LlmParallel bad;
  bad.pipeline = 5;
  EXPECT_NE(error_of([&] { pm::llm_memory(spec, bad); }).find("must divide the layers"), std::string::npos);
}

// ---- Memory: against Megatron-LM's theoretical_memory_usage.py --------------------------------

TEST(LlmMemory, AgreesWithMegatronsTheoreticalMemoryUsage) {
  struct Config {
    std::int64_t h, layers, heads;
    int T, K, gpus;
  };
  // Narayanan et al. (SC'21), Table 1: 1.7 B, 7.5 B, 39.1 B, 145.6 B, 1 T.
  double worst = 0;
  for (const Config& c : {Config{2304, 24, 24, 1, 1, 32}, Config{4096, 36, 32, 4, 1, 128}, Config{8192, 48, 64, 8, 2, 512},
                          Config{12288, 80, 96, 8, 8, 1536}, Config{25600, 128, 160, 8, 64, 3072}}) {
    const auto spec = gpt(c.layers, c.h, c.heads, 2048);
    const int D = c.gpus / (c.T * c.K);
    for (const bool zero : {false, true}) {
      for (const auto rc : {pm::LlmRecompute::Selective, pm::LlmRecompute::Full}) {
        for (const bool sp : {true, false}) {
          pm::LlmParallel par;
          par.tensor = c.T, par.pipeline = c.K, par.data = D, par.distributed_optimizer = zero;
          par.sequence_parallel = sp, par.recompute = rc, par.flash_attention = false;
          const auto ours = pm::llm_memory(spec, par);
          const MegatronArgs a{static_cast<double>(c.h), static_cast<double>(c.layers), static_cast<double>(c.heads),
                               4.0 * c.h, 51200, 2048, 1, static_cast<double>(c.T), static_cast<double>(c.K),
                               static_cast<double>(D), zero, std::nullopt};
          // Two terms the script leaves out or adds, put back so that the rest
          // compares: the learned position table on the first rank (2048·h
          // parameters, whole under T; 2.5% of the 1 T model's first rank,
          // which holds two layers), and the 5% for temporaries of its form
          // without sequence parallelism.
          const double bytes_per_param = zero ? 6 + 12.0 / D : 18;
          const double weights = megatron_weight_and_optimizer(a) + 2048.0 * c.h * bytes_per_param;
          const auto rel = [](double x, double y) { return std::abs(x - y) / y; };
          // The script has no form for full recompute (its report falls back
          // to the form without sequence parallelism, which recomputes only
          // the attention core): there only the weights and optimizer state,
          // the same for every recompute, compare.
          double ours_bytes = ours.weight_and_optimizer_bytes, theirs = weights;
          if (rc == pm::LlmRecompute::Selective) {
            ours_bytes = ours.total_bytes();
            theirs = weights + (sp ? megatron_activation(a) : megatron_activation_without_sp(a) / 1.05);
          }
          const double d = rel(ours_bytes, theirs);
          worst = std::max(worst, d);
          EXPECT_LT(d, 0.02) << "h " << c.h << " T " << c.T << " K " << c.K << " D " << D << " zero " << zero << " sp " << sp
                             << " recompute " << static_cast<int>(rc) << ": ours " << ours_bytes / 1e9 << " GB, Megatron "
                             << theirs / 1e9 << " GB";
          std::printf("h %5lld T %d K %2d D %2d zero %d sp %d %-9s ours %8.3f GB  Megatron %8.3f GB  (%+.3f%%)\n",
                      static_cast<long long>(c.h), c.T, c.K, D, zero, sp,
                      rc == pm::LlmRecompute::Full ? "full(w+o)" : "selective", ours_bytes / 1e9, theirs / 1e9,
                      100 * (ours_bytes - theirs) / theirs);
        }
      }
    }
  }
  std::printf("worst relative difference against Megatron: %.3f%%\n", 100 * worst);
}
