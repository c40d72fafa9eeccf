// A collective as the messages of its pattern (models/collectives.hpp's
// table), between the members of a group on the platform's routes (sim/
// internal; called from an actor of the running SimGrid engine). Both ends
// meet, as in a collective: each message starts when its receiver has asked
// for it.
#pragma once

#include <simgrid/s4u.hpp>
#include <string>

#include "models/collectives.hpp"

namespace pipetwin::sim {

// Where a collective's rounds do their work on cores (a shared host's
// calibrated collectives, models::Topology::collective): each round first
// runs its sends' bytes x seconds_per_byte of one core's work on `host`,
// sharing its cores with whatever else computes there, then sends messages
// that cost only the link's latency. No host: each message carries its bytes
// over the route.
struct RoundWork {
  simgrid::s4u::Host* host = nullptr;
  double seconds_per_byte = 0;
};

// Member `member` of `members` runs its rounds of `entry` over `bytes` (the
// row's pattern, in `chunks` where it pipelines): in each round it posts its
// messages in their order, then waits for them, the later way first (the
// sends when its receives came first, and the other way round). Each ordered
// pair of members has its mailbox, named by `tag` and `group` (so that
// collectives in flight at once keep apart); a pair's messages match in order.
// Alone, every message on a link of its own, the slowest member ends at the
// row's closed form (entry.seconds).
void run_collective(const models::CollectiveEntry& entry, const std::string& tag, int group, int member, int members,
                    double bytes, int chunks, const RoundWork& work = {});

}  // namespace pipetwin::sim
