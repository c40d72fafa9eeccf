// Cores: a shared host's cores when its ranks run to completion (more ranks
// than cores). A rank takes a core when it has work and keeps it until it
// receives a message (a receive gives it up even where the message is there:
// the transport's thread hands it over), its time slice ends while another waits, or, with
// wake preemption, a rank woken by a message waits for one.
#pragma once

#include <deque>
#include <simgrid/s4u.hpp>

namespace pipetwin::sim {

class Cores {
 public:
  explicit Cores(int cores) : free_(cores) {}
  // Blocks until a core is this actor's. `woken`: it waited for a message
  // (woken ranks are handed a core before ranks that were preempted).
  void take(bool woken);
  // The core goes to the first woken waiter, else the first other one, else back to the free ones.
  void give();
  bool anyone_waiting() const { return !woken_.empty() || !queued_.empty(); }
  bool woken_waiting() const { return !woken_.empty(); }

 private:
  int free_;
  std::deque<simgrid::s4u::SemaphorePtr> woken_, queued_;
};

}  // namespace pipetwin::sim
