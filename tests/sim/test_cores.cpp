// Cores (sim/cores.hpp): who gets a shared host's core next, with one queue
// for all the cores or a queue per core (affinity), in SimGrid's own time.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "sim/cores.hpp"

namespace sg4 = simgrid::s4u;
using pipetwin::sim::Cores;

namespace {

// Two cores. Rank 0 runs 3 units of work from t = 0 in slices of 1 and never
// blocks (at each slice's end it gives its core up as a preempted rank does,
// and takes one again). Ranks 1 and 3 (whose first core is the other one)
// arrive at 0.5 and run 4 bursts of 1, each followed by a wait (they give
// their core up blocking and take one again, as woken). Returns each rank's
// end.
void scenario(const std::shared_ptr<Cores>& cores, std::map<int, double>& ends, sg4::Host* host,
              const std::string& tag) {
  sg4::Actor::create("long" + tag, host, [cores, &ends] {
    int core = cores->take(0, true);
    for (int slice = 0; slice < 3; ++slice) {
      sg4::this_actor::sleep_for(1);
      cores->give(core, /*blocking=*/slice == 2);
      if (slice < 2) core = cores->take(0, false);
    }
    ends[0] = sg4::Engine::get_clock();
  });
  for (const int who : {1, 3}) {
    sg4::Actor::create("burst" + std::to_string(who) + tag, host, [cores, &ends, who] {
      sg4::this_actor::sleep_for(0.5);
      for (int burst = 0; burst < 4; ++burst) {
        const int core = cores->take(who, true);
        sg4::this_actor::sleep_for(1);
        cores->give(core, /*blocking=*/true);
      }
      ends[who] = sg4::Engine::get_clock();
    });
  }
}

}  // namespace

TEST(Cores, WithAffinityARankThatNeverBlocksKeepsItsCoreAndAnIdleCorePullsAWaiter) {
  int argc = 1;
  char name[] = "test_sim_cores";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  auto* zone = sg4::create_full_zone("zone");
  sg4::Host* host = zone->create_host("host", 1e9)->set_core_count(8)->seal();
  zone->seal();
  std::map<int, double> affine, shared;
  scenario(std::make_shared<Cores>(2, true), affine, host, "/affine");
  scenario(std::make_shared<Cores>(2, false), shared, host, "/shared");
  engine.run();
  // Affinity: rank 0's slices end with no one queued on its core, so it runs
  // on; ranks 1 and 3 take turns on the other core until rank 0 blocks at 3,
  // when its idle core pulls the one queued since 2.5: they end at 5.5 and 6
  // (the one pulled would wait until 3.5 for its own core and end at 6.5).
  EXPECT_DOUBLE_EQ(affine.at(0), 3.0);
  EXPECT_DOUBLE_EQ(std::min(affine.at(1), affine.at(3)), 5.5);
  EXPECT_DOUBLE_EQ(std::max(affine.at(1), affine.at(3)), 6.0);
  // One queue: rank 0's first slice ends with rank 3 waiting for any core,
  // which takes it; rank 0 waits in turn and ends later.
  EXPECT_GT(shared.at(0), 3.5);
  // Work is conserved either way: 11 units on 2 cores from 0 take at least 5.5.
  for (const auto* ends : {&affine, &shared}) {
    double last = 0;
    for (const auto& [who, end] : *ends) last = std::max(last, end);
    EXPECT_GE(last, 5.5);
  }
}
