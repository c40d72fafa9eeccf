// Eigen: the affine least-squares fit recovers latency and bandwidth.
#include <gtest/gtest.h>

#include "calibration/least_squares.hpp"
#include "schedule/error.hpp"

TEST(Eigen, AffineFitRecoversLatencyAndBandwidth) {
  const double latency = 3e-5, bandwidth = 4e9;
  std::vector<double> bytes, seconds;
  for (double b = 1e3; b <= 1e8; b *= 10) {
    bytes.push_back(b);
    seconds.push_back(latency + b / bandwidth);
  }
  const auto fit = pipetwin::calibration::fit_affine(bytes, seconds);
  EXPECT_NEAR(fit.intercept, latency, 1e-12);
  EXPECT_NEAR(1.0 / fit.slope, bandwidth, bandwidth * 1e-9);
  EXPECT_LT(fit.rms_residual, 1e-12);
  EXPECT_THROW(pipetwin::calibration::fit_affine({1}, {1}), pipetwin::Error);
}
