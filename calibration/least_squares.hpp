// The least squares that calibration fits with (Eigen): a linear problem
// y ~ X beta whose parameters may be bounded below, tied to one another or
// fixed when the data cannot tell them apart; a robust solve of it (Huber
// weights); and the plain affine fit y = intercept + slope x on top of it.
//
// Every fit of the calibration's parts (calibration/fit_parts.hpp: compute
// curves, cold weights, step, transfers) is one Problem solved here.
#pragma once

#include <string>
#include <vector>

namespace pipetwin::calibration {

// One parameter of a Problem, with what to do when its column adds nothing
// to those of the parameters before it (dependent), and its lower bound.
struct Param {
  std::string name;
  enum class OnDependent { Tie, FixZero, FixValue } on_dependent = OnDependent::FixZero;
  int tie_to = -1;             // OnDependent::Tie: the parameter that it shares the value of
  double fixed_value = 0;      // OnDependent::FixValue, and the value when bounded
  double lower = 0;            // values below are bounded: fixed at `bound_value`
  double bound_value = 0;
  bool strictly_above = false; // the bound is > lower (a slope), not >= lower
  std::string why_dependent, why_bounded;
};

struct Problem {
  std::vector<Param> params;           // in priority order: earlier ones are kept when columns are dependent
  std::vector<std::vector<double>> x;  // rows of the design matrix, one entry per parameter
  std::vector<double> y;
};

// Each parameter's value and how it was set: "fitted", "not observed" (a
// column of zeros), "tied to NAME: why", "kept: why", "fixed to 0: why", the
// bound's why, or "bounded with NAME" (tied to a bounded one).
struct Solution {
  std::vector<double> value;
  std::vector<std::string> how;
};

// A parameter that may not be negative: fixed at 0 when it fits so, and at 0
// when dependent (`why_dependent` says why).
Param non_negative(std::string name, std::string why_dependent = {});

// Least squares with the rules above: 1. a parameter whose column is
// dependent on the columns kept before it is tied or fixed; 2. the free
// parameters are solved for (columns scaled to unit norm, QR); the one
// furthest below its bound is fixed at its bound_value, and the rest solved
// again, until none is below.
Solution solve(const Problem& p);

// Row `row`'s prediction: sum_j value_j x_row,j.
double predict_row(const Problem& p, const Solution& s, std::size_t row);

// solve() on relative errors, made robust: each row is weighted by 1 / y (so
// that a 1 ms action counts as much as a 50 ms one), then by Huber's weight of
// its relative residual (k = 1.345 robust standard deviations, the scale from
// the median absolute residual), iterated to convergence. One action slowed
// by the machine counts for little; exact data is fitted exactly.
// `relative` false: absolute residuals instead (unweighted rows), for
// measurements whose error does not scale with them: a flight between two
// ranks' clocks, as uncertain as their alignment (tens of us) however short.
Solution robust_solve(const Problem& p, bool relative = true);

// Huber's loss of a relative error `r` at 5%: r^2 / 2 within, linear beyond.
double huber_loss(double r);

// y = intercept + slope * x, e.g. transfer time = latency + bytes / bandwidth.
struct AffineFit {
  double intercept = 0;
  double slope = 0;
  double rms_residual = 0;
};

// Ordinary least squares (solve(), both parameters unbounded; x values all
// equal: the slope is 0). Throws pipetwin::Error with fewer than two points
// or mismatched lengths.
AffineFit fit_affine(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace pipetwin::calibration
