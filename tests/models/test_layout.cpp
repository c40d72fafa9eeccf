// Megatron-LM's --pipeline-model-parallel-layout read as Megatron-LM reads it
// (the examples of its parse_str_to_list's docstring and of the recipes that
// use it), mapped onto a model's layers, and each wrong layout refused by name.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "models/families.hpp"
#include "models/layout.hpp"
#include "schedule/error.hpp"
#include "tests/support/errors.hpp"

namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace {

using pipetwin::test::error_of;

pm::Model llm(std::int64_t layers) {
  pm::LlmSpec t;
  t.layers = layers, t.hidden = 64, t.ffn_hidden = 256, t.heads = 4, t.seq_len = 32, t.vocab = 100;
  return pm::llm_model(t, pm::Precision::BF16, "tiny");
}

}  // namespace

TEST(Layout, ExpandsAsMegatronDoes) {
  // parse_str_to_list's own example: "Ettt|(tt|)*29,m|L" -> [E t t t] + [t t] * 29 + [m] + [L].
  const auto s = pm::expand_layout("Ettt|(tt|)*29,m|L");
  ASSERT_EQ(s.size(), 32u);
  EXPECT_EQ(s.front(), "Ettt");
  for (int i = 1; i <= 29; ++i) EXPECT_EQ(s[i], "tt") << i;
  EXPECT_EQ(s[30], "m");
  EXPECT_EQ(s[31], "L");
  // Its comments: xy(ab|cd|ef)*2,pq unrolls the group; (|ab)*2,cd; x*n.
  EXPECT_EQ(pm::expand_layout("(|Et)*2,tL"), (std::vector<std::string>{"", "Et", "EttL"}));
  EXPECT_EQ(pm::expand_layout("Et*6|t*6|t*5L"), (std::vector<std::string>{"Etttttt", "tttttt", "tttttL"}));
  EXPECT_TRUE(pm::is_layout("Et*3|t*4|t*4|t*3,L"));
  EXPECT_TRUE(pm::is_layout("EtttL"));
  for (const char* word : {"auto", "uniform", "parameters", "0:3 3:6", "stages.txt", ""}) EXPECT_FALSE(pm::is_layout(word)) << word;
  const auto e = error_of([] { pm::expand_layout("Et*2|x|L"); });
  EXPECT_NE(e.find("invalid character 'x' in stage 1"), std::string::npos) << e;
}

TEST(Layout, MapsOntoTheModelsLayersInOrder) {
  const auto m = llm(14);  // embedding, 14 blocks, head: 16 layers
  // Uneven first and last stages: --decoder-first/last-pipeline-num-layers 3.
  const auto r = pm::layout_ranges(m, "Et*3|t*4|t*4|t*3,L");
  EXPECT_EQ(r, (std::vector<ps::LayerRange>{{0, 4}, {4, 8}, {8, 12}, {12, 16}}));
  // The embedding and the loss as stages of their own.
  const auto own = pm::layout_ranges(m, "E|(t*7|)*2L");
  EXPECT_EQ(own, (std::vector<ps::LayerRange>{{0, 1}, {1, 8}, {8, 15}, {15, 16}}));
  const auto err = [&](const char* layout) { return error_of([&] { pm::layout_ranges(m, layout); }); };
  EXPECT_NE(err("Et*3||t*11L").find("stage 1 is empty"), std::string::npos);
  EXPECT_NE(err("Et*3|t*4|t*3L").find("spells 1 E, 10 t and 1 L; tiny has 1 embedding, 14 blocks and 1 head"), std::string::npos)
      << err("Et*3|t*4|t*3L");
  EXPECT_NE(err("t*3E|t*11L").find("stage 0's 't' falls on tiny's layer 0, embedding"), std::string::npos) << err("t*3E|t*11L");
  EXPECT_NE(err("Et*14|m|L").find("multi-token prediction"), std::string::npos);
  EXPECT_NE(err("Et*15|L").find("spells 1 E, 15 t and 1 L"), std::string::npos) << err("Et*15|L");
  EXPECT_NE(err("Lt*14|E").find("stage 0's 'L' falls on tiny's layer 0, embedding"), std::string::npos) << err("Lt*14|E");
}
