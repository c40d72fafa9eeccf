// Replays a Program in SimGrid: one host per device (or one multi-core host
// that all ranks share), the topology's links and routes, one actor per rank
// walking its action list through the schedule's RankInterpreter.
//
//   compute (F B I W R STEP)  -> an exec of the modelled duration on the rank's host
//   SEND_*                     -> a detached mailbox put of the modelled bytes
//   RECV_*                     -> a blocking get; the mailbox's receiver is set up
//                                 front, so data flows as soon as it is sent; then
//                                 the receiver's cost of taking the message (a sleep)
//
// Network model: CM02 without TCP gamma or cross traffic, so a lone transfer
// takes exactly latency + bytes / bandwidth; concurrent transfers share links.
// SimGrid supports one engine per process: simulate() runs it in a child
// process and reads the timeline back, so callers may simulate many times.
// SimGrid's own log is silent unless PIPETWIN_SIM_LOG is set (any value keeps its stderr;
// a SimGrid log control string, e.g. root.thres:warning, also sets its thresholds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/hardware.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/program.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::sim {

struct SimInput {
  schedule::Program program;                 // complete (lowered) and valid
  std::vector<schedule::StageCosts> stages;  // one per stage; transfers use the bytes, not the *_transfer_s
  models::Topology topology;                 // devices = ranks (rank r on device r)
  // SimGrid's max-min solver precision; 0: 1e-9, loosened past 16 hosts
  // (simulate_here). simulate() replays once more at SimGrid's default 1e-5
  // if the solver fails on its own rounding.
  double maxmin_precision = 0;
};

struct SimResult {
  schedule::Timeline timeline;
  double wall_s = 0;  // wall-clock time of the replay, child process included
};

// Expert parallelism's all-to-alls that the replay sends as messages
// (sim/exchanges.hpp): every member's sends in a step. Beyond
// kMaxExchangeSends (each send and its receive take about 7 us of replay on
// this machine's core: some 15 s) the replay keeps them as their closed
// forms inside the actions, as where they never run as messages.
inline constexpr std::int64_t kMaxExchangeSends = 2'000'000;
std::int64_t exchange_sends(const schedule::Program& program, const std::vector<schedule::StageCosts>& stages,
                            const models::Topology& topology);

// Throws pipetwin::Error on a deadlock (naming the blocked ranks and actions)
// or when the simulation process fails.
SimResult simulate(const SimInput& input);

// The same, split so that a caller can keep several simulation processes in
// flight (sweeps): start_simulation() forks and returns at once; read the
// child's output from `fd` until EOF, then finish_simulation() reaps it.
struct SimProcess {
  int pid = -1;
  int fd = -1;
};
SimProcess start_simulation(const SimInput& input);
SimResult finish_simulation(const SimProcess& process, const std::string& output);

// Runs the replay in this process (one engine per process: call at most once).
schedule::Timeline simulate_here(const SimInput& input);

}  // namespace pipetwin::sim
