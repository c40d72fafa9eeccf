// Least-squares fits that calibration builds on (Eigen).
#pragma once

#include <vector>

namespace pipetwin::calibration {

// y = intercept + slope * x, e.g. transfer time = latency + bytes / bandwidth.
struct AffineFit {
  double intercept = 0;
  double slope = 0;
  double rms_residual = 0;
};

// Throws pipetwin::Error with fewer than two points or mismatched lengths.
AffineFit fit_affine(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace pipetwin::calibration
