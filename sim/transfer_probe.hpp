// The smallest SimGrid replay: one transfer between two hosts over one
// full-duplex link, under the exact analytic network model pipetwin uses
// (CM02, no TCP gamma cap, no cross traffic): time = latency + bytes/bandwidth.
// SimGrid supports one engine per process: call this once per process.
#pragma once

#include <string>

namespace pipetwin::sim {

double simulate_one_transfer(double bytes, double bandwidth_Bps, double latency_s);
std::string simgrid_version();

}  // namespace pipetwin::sim
