// The SimGrid platform of a Program on a topology (sim/ internal; call with
// a SimGrid engine alive).
#pragma once

#include <simgrid/s4u.hpp>
#include <vector>

#include "models/hardware.hpp"
#include "schedule/program.hpp"

namespace pipetwin::sim {

// Hosts compute 1e9 work units per second: modelled seconds become work far
// above SimGrid's work-amount precision.
constexpr double kSpeed = 1e9;
// A shared host's collectives' own host, when their link is calibrated.
inline constexpr const char* kCollectivesHost = "collectives";

// One host per group g = d + D·k (replica d, pipeline rank k), or one shared
// host repeated; the routes between the groups that talk.
std::vector<simgrid::s4u::Host*> build_platform(const models::Topology& topo, const schedule::Program& p);

}  // namespace pipetwin::sim
