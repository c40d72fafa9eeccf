// Cores: a shared host's cores when its ranks run to completion (more ranks
// than cores). A rank takes a core when it has work and keeps it until it
// receives a message (a receive gives it up even where the message is there:
// the transport's thread hands it over), its time slice ends while another waits, or, with
// wake preemption, a rank woken by a message waits for one.
//
// Shared evenly (one queue), a core given up goes to the first rank waiting
// for any. With affinity (Linux's run queues, one per CPU), a rank queues on
// the core it last ran on, unless another is free when it wakes; a core whose
// rank blocks takes the next of its own queue, else pulls one waiting on
// another core (an idle CPU pulls work); a rank whose slice ends gives its core
// only to one queued on the same core, and runs on where none is. A rank
// that never blocks thus keeps its core, while the others share the rest.
#pragma once

#include <deque>
#include <map>
#include <simgrid/s4u.hpp>
#include <vector>

namespace pipetwin::sim {

class Cores {
 public:
  // `affine`: each core its own queue (above); else one queue for all.
  Cores(int cores, bool affine);
  // Blocks until a core is this rank's (`who`: its index, which core it ran
  // on last). `woken`: it waited for a message (woken ranks are handed a core
  // before ranks that were preempted). Returns the core.
  int take(int who, bool woken);
  // Gives `core` up: to the first woken waiter of its queue, else the first
  // other one; with affinity and `blocking` (its rank waits for a message,
  // not preempted), else to one waiting on another core; else it is free.
  void give(int core, bool blocking);
  // Whether a rank woken by a message waits for `core` (with affinity, in its
  // queue; else for any).
  bool woken_waiting(int core) const;

 private:
  struct Waiter {
    simgrid::s4u::SemaphorePtr handed;
    int who;
  };
  struct Queue {
    std::deque<Waiter> woken, queued;
    bool empty() const { return woken.empty() && queued.empty(); }
  };
  Queue& queue_of(int core) { return queues_[affine_ ? core : 0]; }
  const Queue& queue_of(int core) const { return queues_[affine_ ? core : 0]; }
  void hand(int core, Queue& from);

  bool affine_;
  std::vector<bool> busy_;
  std::vector<Queue> queues_;
  std::map<int, int> last_;  // who -> the core it last ran on
  std::map<int, int> got_;   // who -> the core handed to it while it waited
};

}  // namespace pipetwin::sim
