// `pipetwin run` of the llm family across real processes: a Llama-shaped
// model (GQA, SwiGLU, RMSNorm, rotary) and a GPT-2-shaped one (LayerNorm,
// GELU, learned positions, biases) give the weights of one rank whatever K
// and schedule (zero-bubble's deferred weight gradients included) and
// whatever recompute (Megatron-LM's selective and by-layer checkpoints
// included: a checkpoint re-runs what it skipped, the same products), and
// learn.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/shell.hpp"
#include "tests/support/weights.hpp"

namespace fs = std::filesystem;

namespace {

using pipetwin::test::load_weights;
using pipetwin::test::max_difference;
using pipetwin::test::Result;
using pipetwin::test::run_shell;

const std::string kModels = PIPETWIN_TEST_MODELS;

Result run(const std::string& args) { return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1"); }

fs::path scratch(const std::string& name) { return pipetwin::test::scratch_dir("exec_llm", name); }

std::string common(const std::string& model) {
  return "run --model " + kModels + "/" + model + ".yaml -m 4 --batch 8 --steps 3 --optimizer sgd --lr 0.05 --seed 1 "
         "--threads 1";
}

struct Case {
  std::string model;
  std::string schedule;
  int k;
  std::string recompute = "none";  // of the K-rank run; the one-rank run recomputes nothing
};

class LlmEquivalence : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(LlmEquivalence, WeightsEqualThoseOfOneRank) {
  const auto& c = GetParam();
  const auto one = scratch("one_" + c.model + "_" + c.schedule), many = scratch("many_" + c.model + "_" + c.schedule);
  auto r = run(common(c.model) + " -s " + c.schedule + " -k 1 --save-weights " + one.string());
  ASSERT_EQ(r.code, 0) << r.out;
  r = run(common(c.model) + " -s " + c.schedule + " -k " + std::to_string(c.k) + " --recompute " + c.recompute +
          " --save-weights " + many.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const double diff = max_difference(load_weights(many), load_weights(one));
  EXPECT_GE(diff, 0) << "the layers saved differ";
  EXPECT_LT(diff, 1e-6) << c.model << " " << c.schedule << " K=" << c.k << " recompute " << c.recompute;
  std::printf("%s %s K=%d recompute %s: max |w - w(K=1)| = %.3g\n", c.model.c_str(), c.schedule.c_str(), c.k,
              c.recompute.c_str(), diff);
}

INSTANTIATE_TEST_SUITE_P(Exec, LlmEquivalence,
                         ::testing::Values(Case{"tiny-llama", "1f1b", 2}, Case{"tiny-llama", "zb-h1", 2},
                                           Case{"tiny-gpt2", "1f1b", 2}, Case{"tiny-llama", "1f1b", 2, "selective"},
                                           Case{"tiny-llama", "zb-h1", 2, "selective"},
                                           Case{"tiny-llama", "1f1b", 2, "uniform:1"},
                                           Case{"tiny-llama", "1f1b", 2, "uniform:2"},
                                           Case{"tiny-llama", "zb-h1", 2, "block:1"},
                                           Case{"tiny-gpt2", "gpipe", 2, "uniform:1"},
                                           Case{"tiny-gpt2", "1f1b", 2, "selective"}),
                         [](const auto& info) {
                           std::string name = info.param.model + "_" + info.param.schedule + "_" + info.param.recompute;
                           for (auto& ch : name) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

TEST(LlmRun, TheLossGoesDown) {
  for (const std::string model : {"tiny-llama", "tiny-gpt2"}) {
    const auto r = run("run --model " + kModels + "/" + model +
                       ".yaml -s 1f1b -k 2 -m 4 --batch 16 --steps 30 --lr 0.01 --seed 1 --threads 1 --json");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto losses = nlohmann::json::parse(r.out)["measured"]["losses"].get<std::vector<double>>();
    ASSERT_EQ(losses.size(), 30u);
    EXPECT_LT(losses.back(), losses.front() - 0.5) << model << ": " << r.out;
    std::printf("%s: loss %.4f -> %.4f over 30 steps\n", model.c_str(), losses.front(), losses.back());
  }
}
