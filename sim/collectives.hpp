// The data-parallel collectives as the messages of their algorithm, between
// the replicas of one stage on the platform's routes (sim/ internal; called
// from an actor of the running SimGrid engine). Both ends meet, as in a
// collective: each message starts when its receiver has asked for it.
#pragma once

#include <simgrid/s4u.hpp>
#include <string>

namespace pipetwin::sim {

// Where a ring's rounds do their work on cores (a shared host's calibrated
// collectives, models::Topology::collective): each round first runs chunk x
// seconds_per_byte of one core's work on `host`, sharing its cores with
// whatever else computes there, then sends a message that costs only the
// link's latency. No host: the message carries the chunk over the route.
struct RoundWork {
  simgrid::s4u::Host* host = nullptr;
  double seconds_per_byte = 0;
};

// A ring over the data group of one stage: `steps` rounds, each sending
// `chunk` bytes (a whole number) to the next replica and waiting for the
// previous one's; an all-reduce, 2(D-1) rounds of bytes / D, takes 2(D-1) ·
// (latency + ⌈bytes / D⌉ / bandwidth) alone.
void ring(int stage, int replica, int D, int steps, double chunk, const std::string& tag, const RoundWork& work = {});

// A binary tree over the data group (replica i's parent (i - 1) / 2): the
// bytes in `chunks` chunks of ⌈bytes / chunks⌉, reduced up to replica 0, then
// broadcast down, each phase pipelined (a replica forwards chunk k while it
// receives chunk k + 1). Alone, on a link per tree edge, it takes
// 2(h + chunks - 1) · (latency + chunk / bandwidth), h = ⌊log2 D⌋
// (models::tree_all_reduce_seconds); a replica returns once it has every
// chunk back (the root first, the deepest leaves last).
void tree(int stage, int replica, int D, int chunks, double bytes, const std::string& tag);

}  // namespace pipetwin::sim
