// calibration/least_squares: the solver under every fit of calibration keeps
// its parameters' rules (bounds, ties, kept and unobserved values), the robust
// solve leaves an outlier out, and the affine fit sits on the same solver.
#include "calibration/least_squares.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "schedule/error.hpp"

namespace pc = pipetwin::calibration;

namespace {

// A parameter with no bound (lower -inf).
pc::Param free_param(const std::string& name) {
  pc::Param p;
  p.name = name;
  p.lower = -INFINITY;
  return p;
}

// Rows (1, t) for t = 1..n, y = intercept + slope t.
pc::Problem line(double intercept, double slope, int n) {
  pc::Problem p;
  for (int t = 1; t <= n; ++t) {
    p.x.push_back({1.0, static_cast<double>(t)});
    p.y.push_back(intercept + slope * t);
  }
  return p;
}

}  // namespace

TEST(LeastSquares, ExactDataIsFittedExactly) {
  pc::Problem p = line(3, 2, 5);
  p.params = {pc::non_negative("intercept"), pc::non_negative("slope")};
  const pc::Solution s = pc::solve(p);
  EXPECT_NEAR(s.value[0], 3, 1e-12);
  EXPECT_NEAR(s.value[1], 2, 1e-12);
  EXPECT_EQ(s.how[0], "fitted");
  EXPECT_EQ(s.how[1], "fitted");
  for (std::size_t i = 0; i < p.y.size(); ++i) EXPECT_NEAR(pc::predict_row(p, s, i), p.y[i], 1e-12);
}

TEST(LeastSquares, AParameterBelowItsBoundIsFixedThereAndTheRestRefitted) {
  // y = -1 + 2t: the intercept fits negative; bounded at 0, the slope is
  // refitted through the origin: sum(t y) / sum(t^2) = 50 / 30.
  pc::Problem p = line(-1, 2, 4);
  p.params = {pc::non_negative("intercept"), free_param("slope")};
  const pc::Solution s = pc::solve(p);
  EXPECT_EQ(s.value[0], 0);
  EXPECT_EQ(s.how[0], "bounded at 0 (fitted negative)");
  EXPECT_NEAR(s.value[1], 50.0 / 30.0, 1e-12);
  EXPECT_EQ(s.how[1], "fitted");
  // A strict bound (a slope must be > 0), at a value of its own.
  pc::Problem flat = line(5, -0.5, 4);
  pc::Param slope = free_param("slope");
  slope.lower = 0;
  slope.strictly_above = true;
  slope.bound_value = 1e-3;
  slope.why_bounded = "at the floor";
  flat.params = {free_param("intercept"), slope};
  const pc::Solution f = pc::solve(flat);
  EXPECT_EQ(f.value[1], 1e-3);
  EXPECT_EQ(f.how[1], "at the floor");
  EXPECT_NEAR(f.value[0], 3.75 - 1e-3 * 2.5, 1e-12);  // the mean of y less the bounded slope's share
}

TEST(LeastSquares, DependentColumnsAreTiedKeptOrFixedAsTheirRulesSay) {
  pc::Problem p;
  for (int t = 1; t <= 4; ++t) {
    // a and b have the same column; c twice a's; d is never observed.
    p.x.push_back({double(t), double(t), 2.0 * t, 0.0});
    p.y.push_back(4.0 * t + 1.0 * 2 * t);
  }
  pc::Param a = pc::non_negative("a");
  pc::Param b = pc::non_negative("b", "same column as a");
  b.on_dependent = pc::Param::OnDependent::Tie;
  b.tie_to = 0;
  pc::Param c = pc::non_negative("c", "twice a's column");
  c.on_dependent = pc::Param::OnDependent::FixValue;
  c.fixed_value = 1.0;
  pc::Param d = pc::non_negative("d");
  d.on_dependent = pc::Param::OnDependent::FixValue;
  d.fixed_value = 7.0;
  p.params = {a, b, c, d};
  const pc::Solution s = pc::solve(p);
  EXPECT_EQ(s.how[1], "tied to a: same column as a");
  EXPECT_EQ(s.how[2], "kept: twice a's column");
  EXPECT_EQ(s.how[3], "not observed");
  EXPECT_EQ(s.value[2], 1.0);
  EXPECT_EQ(s.value[3], 7.0);  // an unobserved FixValue parameter keeps its value
  // a and b share 4 t: 2 each.
  EXPECT_NEAR(s.value[0], 2.0, 1e-12);
  EXPECT_EQ(s.value[1], s.value[0]);
  // A dependent FixZero parameter is fixed to 0.
  pc::Problem q = line(1, 1, 3);
  for (auto& row : q.x) row.push_back(row[1]);
  q.params = {free_param("intercept"), free_param("slope"), pc::non_negative("copy", "a copy of the slope")};
  const pc::Solution z = pc::solve(q);
  EXPECT_EQ(z.how[2], "fixed to 0: a copy of the slope");
  EXPECT_EQ(z.value[2], 0);
  EXPECT_NEAR(z.value[1], 1, 1e-12);
}

TEST(LeastSquares, ParametersTiedToABoundedOneAreBoundedWithIt) {
  // a and b share a column whose fit is negative: both end at a's bound.
  pc::Problem p;
  for (int t = 1; t <= 3; ++t) {
    p.x.push_back({1.0, double(t), double(t)});
    p.y.push_back(10.0 - 1.0 * t);
  }
  pc::Param a = pc::non_negative("a");
  pc::Param b = pc::non_negative("b", "same as a");
  b.on_dependent = pc::Param::OnDependent::Tie;
  b.tie_to = 1;
  p.params = {free_param("intercept"), a, b};
  const pc::Solution s = pc::solve(p);
  EXPECT_EQ(s.how[1], "bounded at 0 (fitted negative)");
  EXPECT_EQ(s.how[2], "bounded with a");
  EXPECT_EQ(s.value[1], 0);
  EXPECT_EQ(s.value[2], 0);
  EXPECT_NEAR(s.value[0], 8.0, 1e-12);  // the mean of y
}

TEST(LeastSquares, TheRobustSolveLeavesAnOutlierOut) {
  pc::Problem p = line(1e-3, 5e-4, 20);
  p.params = {pc::non_negative("intercept"), pc::non_negative("slope")};
  p.y[7] *= 10;  // one action slowed by the machine
  const pc::Solution plain = pc::solve(p);
  const pc::Solution robust = pc::robust_solve(p);
  EXPECT_GT(std::abs(plain.value[1] / 5e-4 - 1), 0.05);
  EXPECT_NEAR(robust.value[0], 1e-3, 1e-6);
  EXPECT_NEAR(robust.value[1], 5e-4, 5e-7);
  // On absolute residuals too.
  const pc::Solution absolute = pc::robust_solve(p, /*relative=*/false);
  EXPECT_NEAR(absolute.value[1], 5e-4, 5e-7);
}

TEST(LeastSquares, HuberLossIsQuadraticWithinFivePercentAndLinearBeyond) {
  EXPECT_DOUBLE_EQ(pc::huber_loss(0.02), 0.5 * 0.02 * 0.02);
  EXPECT_DOUBLE_EQ(pc::huber_loss(-0.02), 0.5 * 0.02 * 0.02);
  EXPECT_DOUBLE_EQ(pc::huber_loss(0.1), 0.05 * (0.1 - 0.025));
  EXPECT_DOUBLE_EQ(pc::huber_loss(0.05), 0.5 * 0.05 * 0.05);
}

TEST(LeastSquares, TheAffineFitIsASolveOfTwoUnboundedParameters) {
  const auto fit = pc::fit_affine({1, 2, 3, 4}, {-5, -3, -1, 1});
  EXPECT_NEAR(fit.intercept, -7, 1e-12);  // negative: unbounded
  EXPECT_NEAR(fit.slope, 2, 1e-12);
  EXPECT_LT(fit.rms_residual, 1e-12);
  // Every x the same: the slope is 0, the intercept the mean.
  const auto same = pc::fit_affine({2, 2, 2}, {1, 2, 6});
  EXPECT_EQ(same.slope, 0);
  EXPECT_NEAR(same.intercept, 3, 1e-12);
  EXPECT_NEAR(same.rms_residual, std::sqrt((4.0 + 1.0 + 9.0) / 3), 1e-12);
  EXPECT_THROW(pc::fit_affine({1, 2}, {1}), pipetwin::Error);
}
