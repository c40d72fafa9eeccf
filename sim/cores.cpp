// Cores: who gets a shared host's core next (see cores.hpp). SimGrid's actors
// run one at a time, so the queues need no lock.
#include "sim/cores.hpp"

namespace pipetwin::sim {

namespace sg4 = simgrid::s4u;

void Cores::take(bool woken) {
  if (free_ > 0 && !anyone_waiting()) {
    --free_;
    return;
  }
  const sg4::SemaphorePtr mine = sg4::Semaphore::create(0);
  (woken ? woken_ : queued_).push_back(mine);
  mine->acquire();  // give() hands it the core
}

void Cores::give() {
  std::deque<sg4::SemaphorePtr>& next = !woken_.empty() ? woken_ : queued_;
  if (next.empty()) {
    ++free_;
    return;
  }
  const sg4::SemaphorePtr to = next.front();
  next.pop_front();
  to->release();
}

}  // namespace pipetwin::sim
