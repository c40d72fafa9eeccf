// The bounds on the sizes in model specs: the largest model each family
// accepts still has exact integer costs (under UBSan, scripts/sanitize.sh, an
// overflow would abort), and one past any bound is refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/families.hpp"
#include "schedule/error.hpp"

namespace pm = pipetwin::models;

namespace {

pm::Model from_text(const std::string& text) {
  return pm::model_from_yaml(pm::YamlFields(pm::parse_yaml(text, "spec.yaml"), "spec.yaml"));
}

std::string error_of(const std::string& text) {
  try {
    from_text(text);
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "(accepted)";
}

void expect_exact_costs(const pm::Model& m) {
  double params = 0;
  for (const auto& l : m.layers) {
    EXPECT_GE(l.cost.params, 0) << l.name;
    EXPECT_GT(l.cost.output_elems, 0) << l.name;
    EXPECT_TRUE(std::isfinite(l.cost.forward_flops)) << l.name;
    params += static_cast<double>(l.cost.params);
  }
  EXPECT_LT(params, 2e18);
  EXPECT_NEAR(static_cast<double>(m.params()), params, 1e-9 * params);
  const auto cuts = m.cut_elems();  // cuts[p], 0 < p < n
  for (std::size_t p = 1; p < m.layers.size(); ++p) EXPECT_GT(cuts.at(p), 0) << p;
}

}  // namespace

TEST(SpecBounds, TheLargestModelsHaveExactCosts) {
  expect_exact_costs(from_text("family: transformer\nlayers: 100000\nd_model: 1000000\nd_ff: 1000000\nheads: 1000000\n"
                               "seq_len: 100000\nvocab: 10000000\n"));
  std::string hidden = "[1000000";
  for (int i = 1; i < 100000; ++i) hidden += ",1000000";
  expect_exact_costs(from_text("family: mlp\ninput: 1000000\noutput: 1000000\nhidden: " + hidden + "]\n"));
  expect_exact_costs(from_text("family: resnet\nimage: 100000\nin_channels: 1000000\nstem_channels: 1000000\n"
                               "stages: [100000]\nclasses: 10000000\n"));
  expect_exact_costs(from_text("family: resnet\nimage: 100000\nin_channels: 1000000\nstem_channels: 15625\n"
                               "stages: [20000, 20000, 20000, 20000, 19998, 1, 1]\nclasses: 10000000\n"));
  expect_exact_costs(from_text("family: llm\nlayers: 100000\nhidden: 1000000\nffn_hidden: 1000000\nheads: 1000000\n"
                               "seq_len: 1048576\nvocab: 10000000\nflash_attention: false\ndropout: true\n"
                               "positions: learned\nmax_positions: 1048576\n"));
  // A mixture of experts near its parameter bound, 10^18: 330 blocks of
  // 1,000 experts of 3 x 10^12 weights each, every token taking all of them.
  expect_exact_costs(from_text("family: moe\nlayers: 330\nhidden: 1000000\nheads: 1000\nseq_len: 1048576\n"
                               "vocab: 10000000\nexperts: 1000\ntop_k: 1000\nexpert_ffn_hidden: 1000000\n"
                               "shared_experts: 1\n"));
  expect_exact_costs(from_text("family: amoebanet\ncells: 9999\nfilters: 83333\nimage: 100000\nin_channels: 1000000\n"
                               "classes: 10000000\n"));
}

TEST(SpecBounds, OnePastABoundIsRefusedNamingTheField) {
  std::string sixty_five = "[1";
  for (int i = 1; i < 65; ++i) sixty_five += ", 1";
  sixty_five += "]";
  const std::string t = "family: transformer\nlayers: 2\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 8\nvocab: 10\n";
  const struct {
    std::string text, expected;
  } cases[] = {
      {"family: transformer\nlayers: 100001\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 8\nvocab: 10\n",
       "spec.yaml:2: field 'layers': must be at most 100000, got 100001"},
      {"family: transformer\nlayers: 2\nd_model: 1000001\nd_ff: 128\nheads: 1\nseq_len: 8\nvocab: 10\n",
       "spec.yaml:3: field 'd_model': must be at most 1000000"},
      {"family: transformer\nlayers: 2\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 100001\nvocab: 10\n",
       "spec.yaml:6: field 'seq_len': must be at most 100000"},
      {"family: transformer\nlayers: 2\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 8\nvocab: 10000001\n",
       "spec.yaml:7: field 'vocab': must be at most 10000000"},
      {"family: transformer\nlayers: 99999999999999999999\nd_model: 64\nd_ff: 128\nheads: 4\nseq_len: 8\nvocab: 10\n",
       "spec.yaml:2: field 'layers': expected an integer"},
      {"family: mlp\ninput: 4\nhidden: [8, 1000001]\noutput: 2\n",
       "spec.yaml:3: field 'hidden': expected a non-empty list of positive integers up to 1000000"},
      {"family: resnet\nimage: 32\nstem_channels: 16\nstages: [60000, 40001]\nclasses: 10\n",
       "spec.yaml:4: field 'stages': hold 100001 residual blocks, at most 100000"},
      {"family: resnet\nimage: 32\nstem_channels: 64\nstages: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nclasses: 10\n",
       "spec.yaml:4: field 'stages': 15 stages double the stem's 64 channels past 1000000"},
      {"family: resnet\nimage: 32\nstem_channels: 1\nstages: " + sixty_five + "\nclasses: 10\n",
       "spec.yaml:4: field 'stages': holds more than 64 entries"},
      {"family: moe\nlayers: 340\nhidden: 1000000\nheads: 1000\nseq_len: 8\nvocab: 10\nexperts: 1000\ntop_k: 2\n"
       "expert_ffn_hidden: 1000000\n",
       "spec.yaml:7: field 'experts': the model holds 1.02e+18 parameters, more than 10^18"},
      {"family: moe\nlayers: 2\nhidden: 64\nheads: 4\nseq_len: 8\nvocab: 10\nexperts: 100001\ntop_k: 2\n"
       "expert_ffn_hidden: 64\n",
       "spec.yaml:7: field 'experts': must be at most 100000"},
      {"family: amoebanet\ncells: 10002\nfilters: 16\nimage: 32\nclasses: 10\n",
       "spec.yaml:2: field 'cells': must be at most 10000"},
      {"family: amoebanet\ncells: 6\nfilters: 83334\nimage: 32\nclasses: 10\n",
       "spec.yaml:3: field 'filters': must be at most 83333"},
  };
  EXPECT_EQ(error_of(t), "(accepted)");
  for (const auto& c : cases) {
    EXPECT_NE(error_of(c.text).find(c.expected), std::string::npos) << c.text << "\n -> " << error_of(c.text);
  }
}
