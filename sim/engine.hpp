// The replay engine's settings and its profile line (internal to sim/:
// includes SimGrid).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <simgrid/s4u.hpp>

#include "sim/simulator.hpp"

namespace pipetwin::sim {

// The network model and the solver's precision.
void configure(simgrid::s4u::Engine& engine, const SimInput& in);

// PIPETWIN_SIM_PROFILE's line: the replay's phases at times t[0..3],
// appended to `file`.
void write_profile(const char* file, const schedule::Program& p,
                   const std::array<std::chrono::steady_clock::time_point, 4>& t, std::size_t hosts, std::size_t links);

}  // namespace pipetwin::sim
