// pipetwin compare: the library function on hand-made traces with known
// errors, and the command on traces that `pipetwin simulate` writes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "calibration/compare.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/trace.hpp"
#include "tests/support/shell.hpp"

namespace {

using pipetwin::test::has;
using pipetwin::test::Result;
using pipetwin::test::run_shell;

using pipetwin::calibration::compare;
using pipetwin::calibration::Comparison;
using pipetwin::schedule::parse_action;
using pipetwin::schedule::TimedAction;
using pipetwin::schedule::Trace;
using nlohmann::json;

json configuration() {
  return {{"model", "transformer-small"}, {"schedule", "1f1b"},         {"ranks", 2},
          {"stages_per_rank", 1},          {"microbatches", 1},           {"microbatch_size", 4},
          {"recompute", "none"},           {"partition", {{0, 3}, {3, 6}}}};
}

Trace make(const std::vector<std::vector<std::tuple<const char*, double, double>>>& ranks, json meta) {
  Trace t;
  t.metadata = std::move(meta);
  for (const auto& rank : ranks) {
    t.timeline.ranks.emplace_back();
    for (const auto& [name, start, end] : rank) t.timeline.ranks.back().push_back({parse_action(name), start, end});
  }
  return t;
}

// K=2, M=1: the predicted step and a measured one whose every difference is known.
Trace predicted() {
  auto meta = configuration();
  meta["predicted_stash_bytes_per_stage"] = {100.0, 50.0};
  return make({{{"0F0", 0, 1}, {"0SEND_F0", 1, 1}, {"0RECV_B0", 1, 4}, {"0B0", 4, 6}, {"0STEP", 6, 6.5}},
               {{"1RECV_F0", 0, 1}, {"1F0", 1, 2}, {"1B0", 2, 4}, {"1SEND_B0", 4, 4}, {"1STEP", 4, 4.5}}},
              meta);
}

Trace measured() {
  auto meta = configuration();
  meta["predicted_stash_bytes_per_stage"] = {100.0, 50.0};  // run traces carry both; the measured value wins
  meta["measured"] = {{"stages", {{{"stage", 0}, {"peak_stash_bytes", 110.0}}, {{"stage", 1}, {"peak_stash_bytes", 50.0}}}}};
  return make({{{"0F0", 0, 2}, {"0SEND_F0", 2, 2.5}, {"0RECV_B0", 2.5, 6}, {"0B0", 6, 8}, {"0STEP", 8.2, 9.2}},
               {{"1RECV_F0", 0, 2.5}, {"1F0", 2.5, 3.5}, {"1B0", 3.5, 6}, {"1SEND_B0", 6, 6}, {"1STEP", 6, 6.5}}},
              meta);
}

std::string error_of(const Trace& p, const Trace& m) {
  try {
    compare(p, "p.json", m, "m.json");
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "(no error)";
}

void expect_zero(const pipetwin::calibration::Delta& d) {
  EXPECT_EQ(d.error(), 0.0);
  ASSERT_TRUE(d.relative().has_value());
  EXPECT_EQ(*d.relative(), 0.0);
}

void expect_self_compare_is_zero(const Comparison& c) {
  expect_zero(c.step_time_s);
  EXPECT_EQ(c.bubble_fraction.error(), 0.0);
  for (const auto& d : c.busy_s_per_rank) expect_zero(d);
  ASSERT_FALSE(c.op_kinds.empty());
  for (const auto& k : c.op_kinds) {
    expect_zero(k.total_s);
    EXPECT_EQ(k.median_relative_error.value_or(1), 0.0) << k.kind;
    EXPECT_EQ(k.median_abs_relative_error.value_or(1), 0.0) << k.kind;
    EXPECT_EQ(k.without_relative, 0) << k.kind;
  }
  ASSERT_TRUE(c.largest_duration_error && c.largest_start_error);
  EXPECT_EQ(c.largest_duration_error->duration_error(), 0.0);
  EXPECT_EQ(c.largest_start_error->start_error(), 0.0);
  ASSERT_FALSE(c.stash_bytes_per_stage.empty());
  for (const auto& d : c.stash_bytes_per_stage) expect_zero(d);
}

}  // namespace

TEST(Compare, ATraceAgainstItselfIsExactlyZeroEverywhere) {
  for (const auto& t : {predicted(), measured()}) {
    const auto c = compare(t, "a.json", t, "a.json");
    EXPECT_EQ(c.matched_actions, 10);
    expect_self_compare_is_zero(c);
    // and so is every number of the JSON report
    const auto j = c.to_json();
    EXPECT_EQ(j["step_time_s"]["error"], 0.0);
    EXPECT_EQ(j["bubble_fraction"]["error_points"], 0.0);
    for (const auto& k : j["op_kinds"]) EXPECT_EQ(k["total_relative_error"], 0.0);
    for (const auto& s : j["stash_bytes_per_stage"]["stages"]) EXPECT_EQ(s["relative_error"], 0.0);
  }
}

TEST(Compare, AHandMadePairGivesTheExpectedErrors) {
  const auto c = compare(predicted(), "p.json", measured(), "m.json");
  EXPECT_EQ(c.matched_actions, 10);
  EXPECT_DOUBLE_EQ(c.step_time_s.predicted, 6.5);
  EXPECT_DOUBLE_EQ(c.step_time_s.measured, 9.2);
  EXPECT_DOUBLE_EQ(c.step_time_s.error(), -2.7);
  EXPECT_DOUBLE_EQ(*c.step_time_s.relative(), -2.7 / 9.2);
  EXPECT_DOUBLE_EQ(c.bubble_fraction.predicted, 1 - 3 / 6.5);
  EXPECT_DOUBLE_EQ(c.bubble_fraction.measured, 1 - 3.75 / 9.2);
  ASSERT_EQ(c.busy_s_per_rank.size(), 2u);
  EXPECT_DOUBLE_EQ(c.busy_s_per_rank[0].error(), 3 - 4.0);
  EXPECT_DOUBLE_EQ(c.busy_s_per_rank[1].error(), 3 - 3.5);

  std::map<std::string, pipetwin::calibration::OpKindErrors> kinds;
  for (const auto& k : c.op_kinds) kinds[k.kind] = k;
  ASSERT_EQ(c.op_kinds.size(), 5u);  // F B STEP sends receives, in that order
  EXPECT_EQ(c.op_kinds[0].kind, "F");
  EXPECT_EQ(c.op_kinds[4].kind, "receives");
  EXPECT_DOUBLE_EQ(*kinds["F"].median_relative_error, -0.25);  // -0.5 and 0
  EXPECT_DOUBLE_EQ(*kinds["F"].median_abs_relative_error, 0.25);
  EXPECT_DOUBLE_EQ(*kinds["F"].total_s.relative(), (2 - 3.0) / 3);
  EXPECT_DOUBLE_EQ(*kinds["B"].median_relative_error, -0.1);  // 0 and -0.2
  EXPECT_DOUBLE_EQ(*kinds["B"].total_s.relative(), (4 - 4.5) / 4.5);
  EXPECT_DOUBLE_EQ(*kinds["STEP"].median_relative_error, -0.25);
  EXPECT_DOUBLE_EQ(*kinds["STEP"].total_s.relative(), (1 - 1.5) / 1.5);
  EXPECT_DOUBLE_EQ(*kinds["sends"].median_relative_error, -0.5);  // -1 (0 s against 0.5 s) and 0 (0 s both)
  EXPECT_DOUBLE_EQ(*kinds["sends"].total_s.relative(), -1.0);
  EXPECT_DOUBLE_EQ(*kinds["receives"].median_relative_error, (-0.5 / 3.5 + -1.5 / 2.5) / 2);
  EXPECT_EQ(kinds["receives"].actions, 2);

  ASSERT_TRUE(c.largest_duration_error);
  EXPECT_EQ(c.largest_duration_error->rank, 1);
  EXPECT_EQ(pipetwin::schedule::to_string(c.largest_duration_error->action), "1RECV_F0");
  EXPECT_DOUBLE_EQ(c.largest_duration_error->duration_error(), -1.5);
  ASSERT_TRUE(c.largest_start_error);
  EXPECT_EQ(c.largest_start_error->rank, 0);
  EXPECT_EQ(pipetwin::schedule::to_string(c.largest_start_error->action), "0STEP");
  EXPECT_DOUBLE_EQ(c.largest_start_error->start_error(), -2.2);

  ASSERT_EQ(c.stash_bytes_per_stage.size(), 2u);
  EXPECT_EQ(c.stash_predicted_source, "predicted_stash_bytes_per_stage");
  EXPECT_EQ(c.stash_measured_source, "measured.stages[].peak_stash_bytes");
  EXPECT_DOUBLE_EQ(c.stash_bytes_per_stage[0].error(), -10);
  EXPECT_DOUBLE_EQ(*c.stash_bytes_per_stage[0].relative(), -10.0 / 110);
  EXPECT_DOUBLE_EQ(*c.stash_bytes_per_stage[1].relative(), 0.0);

  const auto text = c.to_text();
  EXPECT_TRUE(has(text, "step time    predicted 6.5 s, measured 9.2 s: error -2.7 s (-29.35%)")) << text;
  EXPECT_TRUE(has(text, "duration error: rank 1 1RECV_F0")) << text;
  EXPECT_TRUE(has(text, "start error: rank 0 0STEP")) << text;
  EXPECT_TRUE(has(text, "stage 0: 100 B / 110 B: -10 B (-9.09%)")) << text;
  EXPECT_TRUE(has(text, "config       transformer-small, 1f1b, K=2 V=1 M=1, micro-batch 4, recompute none, partition [[0,3],[3,6]]")) << text;
}

TEST(Compare, TheBubbleOverTheMeasuredRunsStepsWhereItRecordedThem) {
  // No steps recorded: the traced step's bubble alone.
  EXPECT_EQ(compare(predicted(), "p.json", measured(), "m.json").bubble_steps, 0);
  // Five steps: the median of the last four (the first is the warm-up).
  auto m = measured();
  m.metadata["measured"]["bubble_fractions"] = {0.9, 0.5, 0.3, 0.6, 0.4};
  const auto c = compare(predicted(), "p.json", m, "m.json");
  EXPECT_EQ(c.bubble_steps, 4);
  EXPECT_DOUBLE_EQ(c.bubble_over_steps.measured, 0.45);
  EXPECT_DOUBLE_EQ(c.bubble_over_steps.predicted, 1 - 3 / 6.5);
  EXPECT_DOUBLE_EQ(c.bubble_fraction.measured, 1 - 3.75 / 9.2);  // the traced step's, as before
  EXPECT_TRUE(has(c.to_text(), "measured over 4 steps (their median): 45.00%: error +8.85 points")) << c.to_text();
  EXPECT_DOUBLE_EQ(c.to_json()["bubble_fraction"]["measured_over_steps"]["median"].get<double>(), 0.45);
  // A run that says where its counted steps begin (its noise record): from there.
  auto counted = m;
  counted.metadata["measured"]["noise"] = {{"first_counted_step", 2}};
  const auto c2 = compare(predicted(), "p.json", counted, "m.json");
  EXPECT_EQ(c2.bubble_steps, 3);
  EXPECT_DOUBLE_EQ(c2.bubble_over_steps.measured, 0.4);
  counted.metadata["measured"]["noise"]["first_counted_step"] = 5;
  try {
    compare(predicted(), "p.json", counted, "m.json");
    ADD_FAILURE() << "accepted a first counted step past the steps";
  } catch (const pipetwin::Error& e) {
    EXPECT_EQ(std::string(e.what()), "m.json: otherData.measured.noise.first_counted_step is 5, outside the 5 steps of "
                                     "measured.bubble_fractions");
  }
  // A fraction outside [0, 1] names the file, field and index.
  m.metadata["measured"]["bubble_fractions"] = {0.5, -0.25};
  try {
    compare(predicted(), "p.json", m, "m.json");
    ADD_FAILURE() << "accepted a negative bubble";
  } catch (const pipetwin::Error& e) {
    EXPECT_EQ(std::string(e.what()), "m.json: otherData.measured.bubble_fractions[1] must be a fraction between 0 and 1, got -0.25");
  }
}

// The measured run's noise decides what its error means: predicted 6.5 s
// against measured 9.2 s is -29.3%.
TEST(Compare, TheStepErrorIsJudgedAgainstTheNoiseTheRunRecorded) {
  using pipetwin::calibration::Verdict;
  auto m = measured();
  const auto judged = [&](double other, double mad, int steps) {
    m.metadata["measured"]["noise"] = {{"other_share", other},   {"steal_share", 0.0},
                                       {"step_median_s", 9.2},   {"step_mad_s", mad},
                                       {"counted_steps", steps},
                                       {"median_uncertainty_rel", steps >= 3 ? 1.96 * 1.2533 * 1.4826 * mad / std::sqrt(steps) / 9.2 : 0.0},
                                       {"hosts", json::array({{{"other_share", other}, {"load1_start", 0.5}, {"load1_end", 0.7}}})}};
    return compare(predicted(), "p.json", m, "m.json");
  };
  // Quiet, tight steps: a model error.
  auto c = judged(0.0, 0.05, 8);
  ASSERT_TRUE(c.noise.has_value());
  EXPECT_EQ(c.step_judgement.verdict, Verdict::ModelError) << c.step_judgement.why;
  EXPECT_EQ(c.to_json()["verdict"]["step_time"], "model error");
  EXPECT_NE(c.to_text().find("verdict      model error: |error| 29.3%"), std::string::npos) << c.to_text();
  // Steps so spread that the median itself is uncertain by more than 29.3%: within noise.
  c = judged(0.0, 3.0, 8);
  EXPECT_EQ(c.step_judgement.verdict, Verdict::WithinNoise) << c.step_judgement.why;
  // Another process took 3% of the CPU: not meaningful, saying how much it took.
  c = judged(0.03, 0.05, 8);
  EXPECT_EQ(c.step_judgement.verdict, Verdict::NotMeaningful);
  EXPECT_NE(c.step_judgement.why.find("other processes took 3.0% of its CPU"), std::string::npos) << c.step_judgement.why;
  EXPECT_EQ(c.to_json()["noise"]["busy"], true);
  // The same share known only to +-2% (a short run): it may have been less than 3%.
  m.metadata["measured"]["noise"]["share_resolution"] = 0.02;
  c = compare(predicted(), "p.json", m, "m.json");
  EXPECT_EQ(c.step_judgement.verdict, Verdict::ModelError) << c.step_judgement.why;
  // Just under it, the load widens the band by kLoadSensitivity times its share.
  c = judged(0.029, 0.0, 8);
  EXPECT_EQ(c.step_judgement.verdict, Verdict::ModelError);
  EXPECT_NEAR(c.noise->band(), pipetwin::calibration::kLoadSensitivity * 0.029, 1e-12);
  // A trace that recorded no noise: unknown, said so.
  const auto none = compare(predicted(), "p.json", measured(), "m.json");
  EXPECT_FALSE(none.noise.has_value());
  EXPECT_EQ(none.step_judgement.verdict, Verdict::Unknown);
  EXPECT_TRUE(none.to_json()["noise"].is_null());
  EXPECT_NE(none.to_text().find("noise        not recorded"), std::string::npos);
}

// Repeats of the measured run (compare --repeats): their spread from run to
// run widens the band one run's steps give, where it is the wider.
TEST(Compare, RepeatsOfTheMeasuredRunBoundItsNoiseFromRunToRun) {
  using pipetwin::calibration::Verdict;
  auto m = measured();
  m.metadata["producer"] = "pipetwin run";
  m.metadata["measured"]["noise"] = {{"other_share", 0.0}, {"step_median_s", 9.2}, {"step_mad_s", 0.05},
                                     {"counted_steps", 8}, {"median_uncertainty_rel", 0.01}};
  const auto scaled = [&](double f) {
    Trace t = m;
    for (auto& rank : t.timeline.ranks) {
      for (auto& a : rank) a.start *= f, a.end *= f;
    }
    return t;
  };
  const auto with = [&](const std::vector<double>& factors) {
    auto c = compare(predicted(), "p.json", m, "m.json");
    std::vector<Trace> repeats;
    std::vector<std::string> files;
    for (const double f : factors) repeats.push_back(scaled(f)), files.push_back("r" + std::to_string(files.size()) + ".json");
    pipetwin::calibration::add_repeats(c, m, repeats, files);
    return c;
  };
  // Alone the run is tight (+-1%): -29.3% is a model error.
  EXPECT_EQ(compare(predicted(), "p.json", m, "m.json").step_judgement.verdict, Verdict::ModelError);
  // Four repeats at 0.6, 1.4, 0.7 and 1.3 times its pace: steps 5.52 to 12.88 s,
  // median 9.2, MAD 2.76, the median known to t(4) x 1.2533 x 1.4826 x 2.76 /
  // sqrt(5) / 9.2 = 69.2% (Student's t at 97.5% for 4 degrees of freedom: 2.776).
  auto c = with({0.6, 1.4, 0.7, 1.3});
  ASSERT_TRUE(c.repeats.has_value());
  EXPECT_EQ(c.repeats->steps_s.size(), 5u);
  EXPECT_NEAR(c.repeats->median_s, 9.2, 1e-12);
  EXPECT_NEAR(c.repeats->mad_s, 2.76, 1e-12);
  EXPECT_NEAR(c.repeats->median_uncertainty_rel, 2.776 * 1.2533 * 1.4826 * 2.76 / std::sqrt(5.0) / 9.2, 1e-12);
  EXPECT_EQ(c.step_judgement.verdict, Verdict::WithinNoise) << c.step_judgement.why;
  EXPECT_TRUE(has(c.step_judgement.why, "against the median of 5 runs (9200 ms): |error| 29.3%")) << c.step_judgement.why;
  EXPECT_TRUE(has(c.step_judgement.why, "from its repeats' spread")) << c.step_judgement.why;
  // The prediction is held against the runs' median, not the run given: the
  // fastest of them as MEASURED (5.52 s, +17.8%) is judged at 6.5 / 9.2 - 1 too.
  {
    const Trace fast = scaled(0.6);
    auto cf = compare(predicted(), "p.json", fast, "f.json");
    std::vector<Trace> others{m, scaled(1.4), scaled(0.7), scaled(1.3)};
    pipetwin::calibration::add_repeats(cf, fast, others, {"m.json", "a.json", "b.json", "d.json"});
    EXPECT_TRUE(has(cf.step_judgement.why, "against the median of 5 runs (9200 ms): |error| 29.3%")) << cf.step_judgement.why;
  }
  EXPECT_TRUE(has(c.to_text(), "repeats      5 runs of this configuration: steps 5520 to 1.288e+04 ms")) << c.to_text();
  EXPECT_EQ(c.to_json()["repeats"]["files"][0], "m.json");
  EXPECT_EQ(c.to_json()["verdict"]["step_time"], "within noise");
  // No run recorded its steps' bubbles: the traced step's bubble alone.
  EXPECT_EQ(c.bubble_steps, 0);
  // Where every run did, their counted steps pooled: 0.2, 0.4 from the run
  // (its warm-up 0.9 left out), 0.5, 0.6 and 0.7, 0.8 from two repeats.
  m.metadata["measured"]["bubble_fractions"] = {0.9, 0.2, 0.4};
  m.metadata["measured"]["noise"]["first_counted_step"] = 1;
  auto r1 = scaled(1.1), r2 = scaled(0.9);
  r1.metadata["measured"]["bubble_fractions"] = {0.1, 0.5, 0.6};
  r2.metadata["measured"]["bubble_fractions"] = {0.1, 0.7, 0.8};
  c = compare(predicted(), "p.json", m, "m.json");
  EXPECT_DOUBLE_EQ(c.bubble_over_steps.measured, 0.3);
  pipetwin::calibration::add_repeats(c, m, {r1, r2}, {"r1.json", "r2.json"});
  EXPECT_EQ(c.bubble_steps, 6);
  EXPECT_EQ(c.bubble_runs, 3);
  EXPECT_DOUBLE_EQ(c.bubble_over_steps.measured, 0.55);
  EXPECT_TRUE(has(c.to_text(), "measured over 6 steps of 3 runs (their median): 55.00%")) << c.to_text();
  EXPECT_EQ(c.to_json()["bubble_fraction"]["measured_over_steps"]["runs"], 3);
  // How far the bubble moves from run to run: the runs' medians 0.3, 0.55
  // and 0.75, median 0.55, MAD 0.2, its 95% interval t(2) x 1.2533 x 1.4826
  // x 0.2 / sqrt(3) (Student's t at 97.5% for 2 degrees of freedom: 4.303).
  ASSERT_EQ(c.bubble_run_medians.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(c.bubble_run_medians[i], (std::array{0.3, 0.55, 0.75})[i], 1e-12);
  const double band = 4.303 * 1.2533 * 1.4826 * 0.2 / std::sqrt(3.0);
  EXPECT_NEAR(c.bubble_uncertainty, band, 1e-9);
  EXPECT_NEAR(c.to_json()["bubble_fraction"]["measured_over_steps"]["uncertainty_points"].get<double>(), 100 * band, 1e-7);
  // The prediction's bubble against 0.55, within that band or beyond it.
  EXPECT_EQ(c.bubble_judgement.verdict, std::abs(c.bubble_over_steps.error()) <= band ? Verdict::WithinNoise : Verdict::ModelError)
      << c.bubble_judgement.why;
  EXPECT_EQ(pipetwin::calibration::judge_bubble(0.9 * band, c.noise, band, 3).verdict, Verdict::WithinNoise);
  EXPECT_EQ(pipetwin::calibration::judge_bubble(-1.1 * band, c.noise, band, 3).verdict, Verdict::ModelError);
  EXPECT_TRUE(has(pipetwin::calibration::judge_bubble(-1.1 * band, c.noise, band, 3).why, "over 3 runs known to +-"));
  EXPECT_EQ(pipetwin::calibration::judge_bubble(0.0, c.noise, 0.0, 2).verdict, Verdict::Unknown);
  EXPECT_EQ(c.to_json()["verdict"]["bubble"], pipetwin::calibration::verdict_name(c.bubble_judgement.verdict));
  EXPECT_TRUE(has(c.to_text(), "the bubble: ")) << c.to_text();
  {
    // Runs whose medians agree (0.5 each) still know each median only to
    // their steps' spread within the run (0.4 and 0.6: MAD 0.1 about 0.5):
    // t(2) x 1.2533^2 x 1.4826 x 0.1 / sqrt(6 steps), not 0.
    auto a = m, b = r1, d = r1;
    a.metadata["measured"]["bubble_fractions"] = {0.9, 0.4, 0.6};
    b.metadata["measured"]["bubble_fractions"] = {0.1, 0.4, 0.6};
    d.metadata["measured"]["bubble_fractions"] = {0.1, 0.6, 0.4};
    auto same = compare(predicted(), "p.json", a, "m.json");
    pipetwin::calibration::add_repeats(same, a, {b, d}, {"r1.json", "r2.json"});
    EXPECT_NEAR(same.bubble_uncertainty, 4.303 * 1.2533 * 1.2533 * 1.4826 * 0.1 / std::sqrt(6.0), 1e-9);
  }
  // One repeat without them: the measured run's steps alone.
  r2.metadata["measured"].erase("bubble_fractions");
  c = compare(predicted(), "p.json", m, "m.json");
  pipetwin::calibration::add_repeats(c, m, {r1, r2}, {"r1.json", "r2.json"});
  EXPECT_EQ(c.bubble_steps, 2);
  EXPECT_EQ(c.bubble_runs, 1);
  m.metadata["measured"].erase("bubble_fractions");
  // Repeats as tight as the run: still a model error.
  c = with({0.99, 1.01, 1.0, 1.02});
  EXPECT_EQ(c.step_judgement.verdict, Verdict::ModelError) << c.step_judgement.why;
  // A repeat measured on a busy machine beside a quiet run: left out, counted.
  {
    auto loaded = scaled(3.0);
    loaded.metadata["measured"]["noise"]["other_share"] = 0.4;
    auto cb = compare(predicted(), "p.json", m, "m.json");
    pipetwin::calibration::add_repeats(cb, m, {scaled(1.0), loaded}, {"q.json", "b.json"});
    EXPECT_EQ(cb.repeats->steps_s.size(), 2u);
    EXPECT_EQ(cb.repeats->busy, 1);
    EXPECT_TRUE(has(cb.to_text(), "1 more measured on a busy machine, left out")) << cb.to_text();
  }
  // The measured trace, or one repeat, given twice: refused.
  try {
    auto cd = compare(predicted(), "p.json", m, "m.json");
    pipetwin::calibration::add_repeats(cd, m, {scaled(1.0)}, {"m.json"});
    ADD_FAILURE() << "accepted the measured trace as its own repeat";
  } catch (const pipetwin::Error& e) {
    EXPECT_TRUE(has(e.what(), "m.json: given twice")) << e.what();
  }
  // A repeat of another configuration, or a prediction, is refused naming its file.
  auto other = scaled(1.0);
  other.metadata["schedule"] = "gpipe";
  auto c2 = compare(predicted(), "p.json", m, "m.json");
  try {
    pipetwin::calibration::add_repeats(c2, m, {other}, {"o.json"});
    ADD_FAILURE() << "accepted a repeat of another configuration";
  } catch (const pipetwin::Error& e) {
    EXPECT_TRUE(has(e.what(), "o.json: otherData field 'schedule'")) << e.what();
  }
  try {
    pipetwin::calibration::add_repeats(c2, m, {predicted()}, {"p2.json"});
    ADD_FAILURE() << "accepted a prediction as a repeat";
  } catch (const pipetwin::Error& e) {
    EXPECT_TRUE(has(e.what(), "p2.json: otherData field 'producer'")) << e.what();
  }
}

// Runs that measured their compute actions' own CPU time: the repeats say
// how far apart the same work's CPU time was (the host's pace), and a run's
// noise line its median and spread over the counted steps.
TEST(Compare, RepeatsThatMeasuredTheirComputeCpuTimeSayHowFarItMoved) {
  auto m = measured();
  m.metadata["producer"] = "pipetwin run";
  const auto noise_of = [](double cpu) {
    return nlohmann::json{{"other_share", 0.0}, {"step_median_s", 9.2}, {"step_mad_s", 0.05}, {"counted_steps", 3},
                          {"median_uncertainty_rel", 0.01}, {"first_counted_step", 2},
                          {"step_compute_cpu_s", {2 * cpu, 1.5 * cpu, cpu, 1.1 * cpu, 0.9 * cpu}},
                          {"compute_cpu_median_s", cpu}, {"compute_cpu_mad_s", 0.1 * cpu}};
  };
  m.metadata["measured"]["noise"] = noise_of(10.0);
  const auto n = pipetwin::calibration::Noise::of_trace(m.metadata);
  ASSERT_TRUE(n.has_value());
  EXPECT_DOUBLE_EQ(n->compute_cpu_s, 10.0);
  EXPECT_NEAR(n->compute_cpu_spread, 0.1, 1e-12);  // counted 10, 11, 9: MAD 1 over 10
  EXPECT_TRUE(has(n->describe(), "the compute actions' own CPU time 1e+04 ms a step, spread 10.0%")) << n->describe();
  auto r1 = m, r2 = m;
  r1.metadata["measured"]["noise"] = noise_of(13.0);
  r2.metadata["measured"]["noise"] = noise_of(12.0);
  auto c = compare(predicted(), "p.json", m, "m.json");
  pipetwin::calibration::add_repeats(c, m, {r1, r2}, {"r1.json", "r2.json"});
  ASSERT_TRUE(c.repeats.has_value());
  EXPECT_EQ(c.repeats->compute_cpu_s, (std::vector<double>{10.0, 13.0, 12.0}));
  EXPECT_TRUE(has(c.to_text(), "the same compute took 1e+04 to 1.3e+04 ms of CPU a step in them (30% apart: the host's pace)"))
      << c.to_text();
  EXPECT_EQ(c.to_json()["repeats"]["compute_cpu_s"].size(), 3u);
  // One run that did not measure it (an older trace): no such figure.
  r2.metadata["measured"]["noise"].erase("compute_cpu_median_s");
  auto older = compare(predicted(), "p.json", m, "m.json");
  pipetwin::calibration::add_repeats(older, m, {r1, r2}, {"r1.json", "r2.json"});
  EXPECT_TRUE(older.repeats->compute_cpu_s.empty());
  EXPECT_FALSE(has(older.to_text(), "of CPU a step")) << older.to_text();
}

TEST(Compare, ADifferentConfigurationIsRefusedNamingTheFileAndField) {
  for (const auto& field : pipetwin::calibration::configuration_fields()) {
    auto m = measured();
    m.metadata[field] = field == "partition" ? json{{0, 2}, {2, 6}} : json("other");
    const auto e = error_of(predicted(), m);
    EXPECT_TRUE(has(e, "m.json: otherData field '" + field + "'")) << e;
    EXPECT_TRUE(has(e, "different configurations")) << e;
    auto lacking = measured();
    lacking.metadata.erase(field);
    const auto e2 = error_of(predicted(), lacking);
    EXPECT_TRUE(has(e2, "m.json: otherData has no field '" + field + "' (p.json has")) << e2;
  }
}

TEST(Compare, ActionsThatDoNotMatchOneToOneAreRefusedNamingRankAndAction) {
  auto m = measured();
  m.timeline.ranks[1].erase(m.timeline.ranks[1].begin() + 1);  // 1F0
  auto e = error_of(predicted(), m);
  EXPECT_TRUE(has(e, "m.json: rank 1 has no action 1F0 (p.json's rank 1 has it)")) << e;

  m = measured();
  m.timeline.ranks[0].push_back({parse_action("0F1"), 9, 10});
  e = error_of(predicted(), m);
  EXPECT_TRUE(has(e, "p.json: rank 0 has no action 0F1 (m.json's rank 0 has it)")) << e;

  m = measured();
  m.timeline.ranks[1].push_back(m.timeline.ranks[1].front());
  e = error_of(predicted(), m);
  EXPECT_TRUE(has(e, "m.json: rank 1 holds action 1RECV_F0 twice")) << e;

  m = measured();
  m.timeline.ranks.pop_back();  // a rank missing
  e = error_of(predicted(), m);
  EXPECT_TRUE(has(e, "m.json: rank 1 has no action 1RECV_F0")) << e;

  e = error_of(predicted(), Trace{{}, configuration(), {}});
  EXPECT_TRUE(has(e, "m.json: no actions")) << e;
}

TEST(Compare, ATraceWithoutStashBytesIsSaidSo) {
  auto m = measured();
  m.metadata.erase("measured");
  m.metadata.erase("predicted_stash_bytes_per_stage");
  const auto c = compare(predicted(), "p.json", m, "m.json");
  EXPECT_TRUE(c.stash_bytes_per_stage.empty());
  EXPECT_TRUE(has(c.stash_note, "m.json records no stash bytes per stage")) << c.stash_note;
  EXPECT_TRUE(has(c.to_text(), "stash        m.json records no stash bytes")) << c.to_text();
  EXPECT_TRUE(c.to_json()["stash_bytes_per_stage"].contains("missing"));
}

// ---- the command ------------------------------------------------------------

namespace {

Result run(const std::string& args) {
  return run_shell(std::string(PIPETWIN_BINARY) + " " + args + " 2>&1");
}

class CompareCommand : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("pipetwin_compare_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    const std::string common = " --model " PIPETWIN_EXAMPLES_DIR "/transformer-small.yaml --hardware cpu -s 1f1b -k 2 --batch 8";
    ASSERT_EQ(run("simulate" + common + " -m 4 --trace " + path("p.json")).code, 0);
    ASSERT_EQ(run("simulate" + common + " -m 8 --trace " + path("p8.json")).code, 0);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::filesystem::path dir_;
};
std::filesystem::path CompareCommand::dir_;

}  // namespace

TEST_F(CompareCommand, ASimulatedTraceAgainstItselfReportsZero) {
  const auto r = run("compare --json " + path("p.json") + " " + path("p.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["step_time_s"]["error"], 0.0);
  EXPECT_EQ(j["step_time_s"]["relative_error"], 0.0);
  EXPECT_EQ(j["bubble_fraction"]["error_points"], 0.0);
  EXPECT_GT(j["matched_actions"].get<int>(), 20);
  for (const auto& k : j["op_kinds"]) {
    EXPECT_EQ(k["total_relative_error"], 0.0) << k;
    EXPECT_EQ(k["median_relative_error"], 0.0) << k;
  }
  EXPECT_EQ(j["largest_duration_error"]["duration_error_s"], 0.0);
  ASSERT_EQ(j["stash_bytes_per_stage"]["stages"].size(), 2u);
  for (const auto& s : j["stash_bytes_per_stage"]["stages"]) EXPECT_EQ(s["error"], 0.0);
  EXPECT_EQ(j["configuration"]["schedule"], "1f1b");

  const auto text = run("compare " + path("p.json") + " " + path("p.json"));
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(has(text.out, "(+0.00%)")) << text.out;
  EXPECT_TRUE(has(text.out, "error +0.00 points")) << text.out;
}

// compare --repeats through the binary: three "runs" made of the simulated
// trace (its producer set to a run's), their steps 1, 1.1 and 0.9 times its.
TEST_F(CompareCommand, RepeatsAreReadAndTheirMedianJudged) {
  auto doc = json::parse(pipetwin::schedule::read_file(path("p.json")));
  doc["otherData"]["producer"] = "pipetwin run";
  const auto write_scaled = [&](const std::string& name, double f) {
    auto d = doc;
    for (auto& e : d["traceEvents"]) {
      if (e.value("ph", "") != "X") continue;
      e["ts"] = e["ts"].get<double>() * f;
      e["dur"] = e["dur"].get<double>() * f;
    }
    pipetwin::schedule::write_file_atomic(path(name), d.dump());
  };
  write_scaled("r1.json", 1.0);
  write_scaled("r2.json", 1.1);
  write_scaled("r3.json", 0.9);
  const auto r = run("compare --json " + path("p.json") + " " + path("r1.json") + " --repeats " + path("r2.json") + " " +
                     path("r3.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  ASSERT_EQ(j["repeats"]["steps_s"].size(), 3u);
  EXPECT_NEAR(j["repeats"]["median_s"].get<double>(), j["step_time_s"]["measured"].get<double>(), 1e-9);
  EXPECT_NEAR(j["repeats"]["relative_error"].get<double>(), 0.0, 1e-9);
  EXPECT_GT(j["repeats"]["median_uncertainty_rel"].get<double>(), 0.0);
  EXPECT_EQ(j["repeats"]["files"][2], path("r3.json"));
  const auto text = run("compare " + path("p.json") + " " + path("r1.json") + " --repeats " + path("r2.json") + " " +
                        path("r3.json"));
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(has(text.out, "repeats      3 runs of this configuration")) << text.out;
  EXPECT_TRUE(has(text.out, "against the median of 3 runs")) << text.out;
}

TEST_F(CompareCommand, MismatchedTracesExitWithOneLineNamingFileAndField) {
  const auto r = run("compare " + path("p.json") + " " + path("p8.json"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "pipetwin: error: " + path("p8.json") + ": otherData field 'microbatches' is 8 but " +
                             path("p.json") + " has 4"))
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  const auto missing = run("compare " + path("p.json") + " " + path("nothing.json"));
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_TRUE(has(missing.out, path("nothing.json"))) << missing.out;
}

TEST_F(CompareCommand, ScheduleChecksBothTracesRanTheFilesOrder) {
  // A schedule file written by `pipetwin schedule`, and a compute-only PyTorch
  // CSV of the same order: p.json (the 1f1b generator, K=2, M=4) ran both.
  ASSERT_EQ(run("schedule -s 1f1b -k 2 -m 4 --format text --out " + path("1f1b.txt")).code, 0);
  ASSERT_EQ(run("schedule -s 1f1b -k 2 -m 4 --format pytorch-csv --compute-only --out " + path("1f1b.csv")).code, 0);
  for (const std::string file : {"1f1b.txt", "1f1b.csv"}) {
    const auto r = run("compare --schedule " + path(file) + " " + path("p.json") + " " + path("p.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(has(r.out, "schedule     both traces ran " + path(file) + "'s order (")) << r.out;
    const auto j = run("compare --json --schedule " + path(file) + " " + path("p.json") + " " + path("p.json"));
    ASSERT_EQ(j.code, 0) << j.out;
    // 2 ranks x (4 F + 4 B + STEP).
    EXPECT_EQ(json::parse(j.out)["schedule"]["actions_checked"], 18) << j.out;
  }
  // gpipe's order is not 1f1b's: the first action that differs, on its rank, is named.
  ASSERT_EQ(run("schedule -s gpipe -k 2 -m 4 --format text --out " + path("gpipe.txt")).code, 0);
  const auto wrong = run("compare --schedule " + path("gpipe.txt") + " " + path("p.json") + " " + path("p.json"));
  EXPECT_EQ(wrong.code, 1) << wrong.out;
  EXPECT_TRUE(has(wrong.out, path("p.json") + ": rank 0's compute action 3 is 0B0, where " + path("gpipe.txt") +
                                 " has 0F2: not the run of that schedule"))
      << wrong.out;
  // Another shape: the ranks are named before any action.
  ASSERT_EQ(run("schedule -s 1f1b -k 4 -m 4 --format text --out " + path("k4.txt")).code, 0);
  const auto shape = run("compare --schedule " + path("k4.txt") + " " + path("p.json") + " " + path("p.json"));
  EXPECT_EQ(shape.code, 1) << shape.out;
  EXPECT_TRUE(has(shape.out, "ran 2 ranks and 2 stages, but " + path("k4.txt") + " has 4 ranks")) << shape.out;
  // A trace that records no program cannot be checked, and says so.
  auto t = pipetwin::schedule::read_chrome_trace(path("p.json"));
  t.metadata.erase("program");
  pipetwin::schedule::write_chrome_trace(path("old.json"), t);
  const auto old = run("compare --schedule " + path("1f1b.txt") + " " + path("old.json") + " " + path("p.json"));
  EXPECT_EQ(old.code, 1) << old.out;
  EXPECT_TRUE(has(old.out, path("old.json") + ": otherData has no 'program'")) << old.out;
}
