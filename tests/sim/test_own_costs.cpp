// Simulating with the user's own costs (models/cost_table, twin/own_costs):
// closed forms of GPipe and 1F1B with and without transfers, the memory of
// each schedule's stash, SimGrid against the evaluator, and the table's
// errors naming the file, the line and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "models/cost_table.hpp"
#include "tests/support/errors.hpp"
#include "twin/own_costs.hpp"

namespace {

namespace pm = pipetwin::models;
namespace pt = pipetwin::twin;
using pipetwin::test::error_of;

pt::ScenarioSpec spec(const std::string& schedule, int K, int M) {
  pt::ScenarioSpec s;
  s.schedule = schedule, s.ranks = K, s.microbatches = M;
  return s;
}

pm::RunSummary simulate(const std::string& table, const pt::ScenarioSpec& s, pt::Engine engine = pt::Engine::Auto) {
  const auto sc = pt::build_costs_scenario(s, pm::parse_cost_table(table, "t.yaml"));
  return pt::summarize(*sc, pt::predict(*sc, engine));
}

const std::string kUniform =
    "stages:\n  - {forward_s: 0.010, backward_s: 0.020, activation_bytes: 1e9, weights_bytes: 2e9,"
    " gradients_bytes: 2e9, optimizer_bytes: 8e9}\n";

TEST(OwnCosts, GpipeIsTheClosedFormWithoutTransfers) {
  const int K = 4, M = 8;
  const auto s = simulate(kUniform, spec("gpipe", K, M));
  EXPECT_NEAR(s.step_time_s, (M + K - 1) * 0.030, 1e-12);
  EXPECT_NEAR(s.bubble, double(K - 1) / (M + K - 1), 1e-12);
  EXPECT_DOUBLE_EQ(s.samples, M);
  // GPipe stashes every micro-batch before the first backward.
  ASSERT_EQ(s.memory.size(), 4u);
  EXPECT_EQ(s.memory[0].peak_activations, M);
  EXPECT_DOUBLE_EQ(s.memory[0].parts.activations, M * 1e9);
  EXPECT_DOUBLE_EQ(s.memory[0].peak_bytes, 12e9 + M * 1e9);
  EXPECT_TRUE(std::isinf(s.memory[0].capacity_bytes));
}

TEST(OwnCosts, OneFOneBStashesKMicrobatchesAtTheFirstStage) {
  const int K = 4, M = 8;
  const auto s = simulate(kUniform, spec("1f1b", K, M));
  EXPECT_NEAR(s.step_time_s, (M + K - 1) * 0.030, 1e-12);
  EXPECT_EQ(s.memory[0].peak_activations, K);
  EXPECT_EQ(s.memory[K - 1].peak_activations, 1);
  EXPECT_DOUBLE_EQ(s.memory[0].parts.activations, K * 1e9);
}

TEST(OwnCosts, TransfersOnTheTablesLinkAddTheirFlightPerHop) {
  const int K = 4, M = 8;
  // 100 MB over 10 GB/s with 1 ms latency: 11 ms a hop, once each way per stage boundary on the critical path.
  const std::string table = "stages:\n  - {forward_s: 0.010, backward_s: 0.020, output_bytes: 1e8}\n"
                            "link: {bandwidth: 1e10, latency_s: 0.001}\n";
  const auto s = simulate(table, spec("gpipe", K, M));
  EXPECT_NEAR(s.step_time_s, (M + K - 1) * 0.030 + 2 * (K - 1) * 0.011, 1e-12);
}

TEST(OwnCosts, StagesOneByOneAndTheSlowestSetsThePace) {
  // 1F1B's steady state runs at the slowest stage's F + B.
  const std::string table =
      "stages:\n  - {forward_s: 0.01, backward_s: 0.02}\n  - {forward_s: 0.02, backward_s: 0.04}\n"
      "  - {forward_s: 0.01, backward_s: 0.02}\n";
  const int M = 64;
  const auto s = simulate(table, spec("1f1b", 3, M));
  EXPECT_GT(s.step_time_s, M * 0.06);
  EXPECT_LT(s.step_time_s, M * 0.06 + 4 * 0.06);
  EXPECT_EQ(error_of([&] { simulate(table, spec("1f1b", 4, 8)); }),
            "t.yaml: 3 stages, but the schedule has 4: give one entry per stage, or one for every stage");
}

TEST(OwnCosts, ZeroBubbleNeedsTheBackwardSplit) {
  EXPECT_EQ(error_of([&] { simulate(kUniform, spec("zb-h1", 4, 8)); }),
            "t.yaml: stage 0: schedule zb-h1 splits the backward into I and W: give input_grad_s and weight_grad_s");
  // With I and W, ZB-H1 fills 1F1B's bubble with W: a shorter step.
  const std::string split = "stages:\n  - {forward_s: 0.010, input_grad_s: 0.010, weight_grad_s: 0.010}\n";
  const auto zb = simulate(split, spec("zb-h1", 4, 8));
  const auto f1b = simulate(split, spec("1f1b", 4, 8));
  EXPECT_NEAR(f1b.step_time_s, 11 * 0.030, 1e-12);
  EXPECT_LT(zb.step_time_s, f1b.step_time_s - 0.01);
}

TEST(OwnCosts, RecomputeRunsTheTablesRecomputeAndKeepsOnlyInputs) {
  const std::string table = "stages:\n  - {forward_s: 0.010, backward_s: 0.020, recompute_s: 0.005,"
                            " output_bytes: 1e6, activation_bytes: 1e9}\n";
  auto s = spec("1f1b", 4, 8);
  s.recompute = "full";
  const auto r = simulate(table, s);
  // R waits for nothing: it runs while a stage waits for its gradient, so
  // only the stage's own M recomputes join the fill and the drain.
  EXPECT_NEAR(r.step_time_s, 3 * 0.030 + 8 * 0.035, 1e-9);
  // Stage 1 keeps stage 0's outputs for its checkpointed micro-batches, and one whole micro-batch re-materialized.
  EXPECT_GT(r.memory[1].peak_inputs, 0);
  EXPECT_LT(r.memory[1].parts.activations, 2e9 + 4e6);
  EXPECT_GE(r.memory[1].parts.activations, 1e9);
}

TEST(OwnCosts, SimGridOnAHardwareAgreesWithTheEvaluatorWithoutContention) {
  const std::string table = "stages:\n  - {forward_s: 0.010, backward_s: 0.020, output_bytes: 5e7, activation_bytes: 1e9}\n";
  auto s = spec("1f1b", 4, 8);
  s.hardware = "dgx-a100-80gb";
  const auto fast = simulate(table, s, pt::Engine::Fast);
  const auto grid = simulate(table, s, pt::Engine::SimGrid);
  EXPECT_GT(fast.step_time_s, 11 * 0.030);  // the transfers on the hardware's links take time
  EXPECT_NEAR(grid.step_time_s, fast.step_time_s, 1e-6 * fast.step_time_s);
  EXPECT_DOUBLE_EQ(fast.memory[0].capacity_bytes, grid.memory[0].capacity_bytes);
  EXPECT_FALSE(std::isinf(fast.memory[0].capacity_bytes));  // the hardware's device
  EXPECT_NE(error_of([&] { simulate(table + "link: {bandwidth: 1e9}\n", s); }).find("field 'link'"), std::string::npos);
  s.hardware.clear();
  EXPECT_EQ(error_of([&] { simulate(table, s, pt::Engine::SimGrid); }),
            "--engine simgrid replays the transfers on a network: give --hardware");
}

TEST(OwnCosts, ACsvIsTheSameTableAndErrorsNameItsLine) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipetwin-costs-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto csv = (dir / "c.csv").string();
  std::ofstream(csv) << "# two stages\nstage,forward_s,backward_s,activation_bytes\n0,0.01,0.02,1e9\n1,0.02,0.04,2e9\n";
  const auto yaml = "stages:\n  - {forward_s: 0.01, backward_s: 0.02, activation_bytes: 1e9}\n"
                    "  - {forward_s: 0.02, backward_s: 0.04, activation_bytes: 2e9}\n";
  auto s = spec("1f1b", 2, 4);
  const auto a = pt::build_costs_scenario(s, pm::read_cost_table(csv));
  const auto from_csv = pt::summarize(*a, pt::predict(*a, pt::Engine::Fast));
  const auto from_yaml = simulate(yaml, s);
  EXPECT_DOUBLE_EQ(from_csv.step_time_s, from_yaml.step_time_s);
  EXPECT_DOUBLE_EQ(from_csv.memory[1].peak_bytes, from_yaml.memory[1].peak_bytes);
  std::ofstream(csv) << "stage,forward_s,backward_s\n0,0.01,0.02\n1,fast,0.04\n";
  EXPECT_EQ(error_of([&] { pm::read_cost_table(csv); }),
            csv + ":3: field 'stages[1].forward_s': expected a number, got 'fast'");
  std::filesystem::remove_all(dir);
}

TEST(OwnCosts, BadTablesNameTheField) {
  EXPECT_EQ(error_of([] { pm::parse_cost_table("stages:\n  - {forward_s: 0.01}\n", "t.yaml"); }),
            "t.yaml:2: field 'stages[0].backward_s': missing: give backward_s, or input_grad_s and weight_grad_s");
  EXPECT_NE(error_of([] { pm::parse_cost_table("stages:\n  - {forward_s: 0.01, backward_s: 1, fwd: 2}\n", "t.yaml"); })
                .find("field 'stages[0].fwd': unknown"),
            std::string::npos);
  EXPECT_NE(error_of([] { pm::parse_cost_table("stages:\n  - {forward_s: -1, backward_s: 1}\n", "t.yaml"); })
                .find("must not be negative"),
            std::string::npos);
  EXPECT_NE(error_of([] { pm::parse_cost_table("stages: []\n", "t.yaml"); }).find("field 'stages'"), std::string::npos);
  EXPECT_NE(error_of([] { pm::parse_cost_table("{stages: [{forward_s: 1, backward_s: 1}], link: {bandwidth: 0}}", "t.json"); })
                .find("field 'link.bandwidth'"),
            std::string::npos);
  auto s = spec("1f1b", 2, 4);
  s.data_parallel = 2;
  EXPECT_NE(error_of([&] { simulate(kUniform, s); }).find("--tensor, --data"), std::string::npos);
}

}  // namespace
