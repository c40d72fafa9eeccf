// Model families: parameter and FLOP counts against closed forms, layer
// shapes, cut sizes of branching graphs, the example specs (and that the
// example hardware files beside them load).
#include <gtest/gtest.h>

#include <filesystem>
#include <yaml-cpp/yaml.h>

#include "models/cost_table.hpp"
#include "models/families.hpp"
#include "models/hardware.hpp"

namespace pm = pipetwin::models;

TEST(Transformer, ParameterCountFollowsTheShapes) {
  for (const pm::TransformerSpec t : {pm::TransformerSpec{2, 64, 256, 4, 16, 100}, pm::TransformerSpec{24, 1024, 8192, 16, 1024, 32000},
                                      pm::TransformerSpec{12, 768, 3072, 12, 512, 30522}, pm::TransformerSpec{1, 8, 8, 1, 1, 1}}) {
    const auto m = pm::transformer_model(t, pm::Precision::FP32, "t");
    EXPECT_EQ(m.params(), pm::transformer_params_closed_form(t));
    // Written out once more, term by term: embeddings, blocks (attention 4d²+4d,
    // FFN 2·d·f + f + d, two norms 4d), head (norm 2d, projection d·V + V).
    const std::int64_t d = t.d_model, f = t.d_ff, V = t.vocab, s = t.seq_len, L = t.layers;
    EXPECT_EQ(m.params(), V * d + s * d + L * ((4 * d * d + 4 * d) + (2 * d * f + f + d) + 4 * d) + (2 * d + d * V + V));
    EXPECT_EQ(m.layers.size(), static_cast<std::size_t>(L + 2));
  }
}

TEST(Transformer, BertBaseSizedBlocksHaveTheKnownCount) {
  // 12 blocks of d=768, d_ff=3072: 7,087,872 parameters each (as BERT-base's encoder layers).
  const auto m = pm::transformer_model({12, 768, 3072, 12, 512, 30522}, pm::Precision::FP32, "bert-like");
  EXPECT_EQ(m.layers[1].cost.params, 7087872);
}

TEST(Transformer, FlopsFollowTheClosedFormForSeveralSizes) {
  for (const pm::TransformerSpec t : {pm::TransformerSpec{4, 256, 1024, 8, 128, 5000}, pm::TransformerSpec{2, 64, 256, 4, 16, 100},
                                      pm::TransformerSpec{24, 1024, 8192, 16, 1024, 32000},
                                      pm::TransformerSpec{12, 768, 3072, 12, 512, 30522}, pm::TransformerSpec{1, 8, 24, 1, 3, 7}}) {
    for (const auto precision : {pm::Precision::FP32, pm::Precision::BF16}) {
      const auto m = pm::transformer_model(t, precision, "t");
      const double s = static_cast<double>(t.seq_len), d = static_cast<double>(t.d_model), f = static_cast<double>(t.d_ff),
                   V = static_cast<double>(t.vocab), L = static_cast<double>(t.layers);
      for (int b = 1; b <= t.layers; ++b) {
        const auto& block = m.layers[b].cost;
        EXPECT_DOUBLE_EQ(block.forward_flops, 8 * s * d * d + 4 * s * d * f + 4 * s * s * d);
        EXPECT_DOUBLE_EQ(block.input_grad_flops, 8 * s * d * d + 4 * s * d * f + 8 * s * s * d);
        EXPECT_DOUBLE_EQ(block.weight_grad_flops, 8 * s * d * d + 4 * s * d * f);
        EXPECT_EQ(block.output_elems, t.seq_len * t.d_model);
        EXPECT_EQ(m.layers[b].kind, pm::LayerKind::TransformerBlock);
        EXPECT_EQ(m.layers[b].shape.heads, t.heads);
      }
      EXPECT_DOUBLE_EQ(m.forward_flops(), s * d + L * (8 * s * d * d + 4 * s * d * f + 4 * s * s * d) + 2 * s * d * V + 5 * s * V);
    }
  }
}

TEST(Transformer, TrainingFlopsMatchMegatronsFormula) {
  // Narayanan et al. (SC'21), with d_ff = 4d: one step costs
  //   72 B s L d² (1 + s/(6d) + V/(12 L d))
  // FLOPs without recompute (forward + backward of the blocks and the logit
  // layer); pipetwin adds the embedding's and the softmax's element-wise work.
  for (const pm::TransformerSpec t : {pm::TransformerSpec{24, 1024, 4096, 16, 1024, 32000}, pm::TransformerSpec{2, 64, 256, 4, 16, 100},
                                      pm::TransformerSpec{48, 1600, 6400, 25, 1024, 50257}}) {
    const auto m = pm::transformer_model(t, pm::Precision::BF16, "t");
    const double s = static_cast<double>(t.seq_len), d = static_cast<double>(t.d_model), V = static_cast<double>(t.vocab),
                 L = static_cast<double>(t.layers);
    double total = 0;
    for (const auto& l : m.layers) total += l.cost.forward_flops + l.cost.backward_flops();
    const double elementwise = 2 * s * d + 6 * s * V;
    EXPECT_NEAR(total - elementwise, 72 * s * L * d * d * (1 + s / (6 * d) + V / (12 * L * d)), 1e-9 * total);
  }
}

TEST(Mlp, ParametersAndFlops) {
  const auto m = pm::mlp_model({10, 3, {20, 30}}, pm::Precision::FP32, "mlp");
  EXPECT_EQ(m.params(), (10 * 20 + 20) + (20 * 30 + 30) + (30 * 3 + 3));
  EXPECT_DOUBLE_EQ(m.forward_flops(), 2.0 * (10 * 20 + 20 * 30 + 30 * 3));
  EXPECT_DOUBLE_EQ(m.layers[0].cost.input_grad_flops, 0);  // no gradient for the data
  // ReLU on the input of every layer but the first: the same network as a
  // ReLU after every layer but the last, with each activation kept once.
  EXPECT_FALSE(m.layers[0].shape.relu);
  EXPECT_TRUE(m.layers[1].shape.relu);
  EXPECT_TRUE(m.layers[2].shape.relu);
  EXPECT_EQ(m.layers[0].cost.stashed_elems, 0);       // reads the data
  EXPECT_EQ(m.layers[1].cost.stashed_elems, 20);      // ReLU(input)
  EXPECT_EQ(m.layers[2].cost.stashed_elems, 30 + 3);  // ReLU(input) and the log-probabilities
}

TEST(ResNet, Cifar18HasTheKnownParameterCount) {
  // ResNet-18 for CIFAR-10 (3x3 stem, basic blocks [2,2,2,2], bias-free convs
  // with batch norm, 1x1 projection shortcuts): 11,173,962 parameters.
  const auto m = pm::resnet_model({32, 3, 64, 10, {2, 2, 2, 2}}, pm::Precision::FP32, "resnet18");
  EXPECT_EQ(m.params(), 11173962);
  EXPECT_EQ(m.layers.back().kind, pm::LayerKind::ClassifierHead);
}

TEST(CutSizes, EveryTensorCrossingACutCountsOnce) {
  // 0 -> 1 -> 3, 0 -> 2 -> 3, 0 -> 3: layer 0's output crosses cuts 1, 2, 3 once each.
  pm::Model m;
  m.input_elems = 7;
  for (int i = 0; i < 5; ++i) {
    pm::Layer l;
    l.name = "l" + std::to_string(i);
    l.cost.output_elems = 10 * (i + 1);
    m.layers.push_back(l);
  }
  m.layers[1].inputs = {0};
  m.layers[2].inputs = {0};
  m.layers[3].inputs = {0, 1, 2};
  m.layers[4].inputs = {3};
  const auto cut = m.cut_elems();
  EXPECT_EQ(cut[0], 7);             // the model input
  EXPECT_EQ(cut[1], 10);            // l0
  EXPECT_EQ(cut[2], 10 + 20);       // l0, l1
  EXPECT_EQ(cut[3], 10 + 20 + 30);  // l0, l1, l2
  EXPECT_EQ(cut[4], 40);            // l3
  EXPECT_EQ(cut[5], 0);
}

TEST(AmoebaNet, CellsBranchAndSkipAcrossCells) {
  const auto m = pm::amoebanet_model({3, 16, 32, 3, 10}, pm::Precision::FP32, "amoeba");
  // stem + 3 normal + 2 reduction cells of 11 layers + head
  EXPECT_EQ(m.layers.size(), 1u + 5 * 11 + 1);
  int adds = 0;
  for (const auto& l : m.layers) {
    for (const int u : l.inputs) EXPECT_LT(u, &l - m.layers.data());  // a topological order
    if (l.kind == pm::LayerKind::Add) {
      ++adds;
      EXPECT_EQ(l.inputs.size(), 2u);
    }
  }
  EXPECT_EQ(adds, 15);
  // Between two cells both h[i-1] and h[i-2] cross the cut.
  const auto cut = m.cut_elems();
  const int first_cell_end = 1 + 11;  // position after cell0.out
  EXPECT_EQ(cut[first_cell_end], m.layers[0].cost.output_elems + m.layers[first_cell_end - 1].cost.output_elems);
}

TEST(Examples, EveryModelSpecLoads) {
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(PIPETWIN_EXAMPLES_DIR)) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() != ".yaml") continue;
    const YAML::Node top = YAML::LoadFile(entry.path().string());
    if (top["stages"] && top["stages"].IsSequence() && top["stages"][0].IsMap()) {  // a cost table (simulate --costs)
      EXPECT_FALSE(pm::read_cost_table(entry.path().string()).stages.empty()) << name;
      continue;
    }
    if (top["preset"] || top["device"] || top["devices"]) {  // a hardware file
      EXPECT_FALSE(pm::load_hardware(entry.path().string()).name.empty()) << name;
      continue;
    }
    const auto m = pm::load_model(entry.path().string());
    EXPECT_GT(m.params(), 0) << name;
    EXPECT_GT(m.layers.size(), 2u) << name;
    ++loaded;
  }
  EXPECT_GE(loaded, 6);
  EXPECT_EQ(pm::load_model(std::string(PIPETWIN_EXAMPLES_DIR) + "/transformer-24.yaml").layers.size(), 26u);
}
