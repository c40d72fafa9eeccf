// SimGrid: a two-host platform in code, one transfer, the exact analytic time.
#include <gtest/gtest.h>

#include "sim/transfer_probe.hpp"

TEST(SimGrid, OneTransferTakesLatencyPlusBytesOverBandwidth) {
  const double bytes = 4e6, bandwidth = 1e9, latency = 1e-5;
  EXPECT_NEAR(pipetwin::sim::simulate_one_transfer(bytes, bandwidth, latency), latency + bytes / bandwidth, 1e-12);
  EXPECT_EQ(pipetwin::sim::simgrid_version().rfind("3.", 0), 0u);
}
