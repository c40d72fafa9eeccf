// Cores: who gets a shared host's core next (see cores.hpp). SimGrid's actors
// run one at a time, so the queues need no lock.
#include "sim/cores.hpp"

#include <algorithm>

namespace pipetwin::sim {

namespace sg4 = simgrid::s4u;

Cores::Cores(int cores, bool affine)
    : affine_(affine), busy_(static_cast<std::size_t>(std::max(cores, 1)), false),
      queues_(affine ? busy_.size() : 1) {}

int Cores::take(int who, bool woken) {
  const auto last = last_.find(who);
  const int home = last != last_.end() ? last->second : who % static_cast<int>(busy_.size());
  // A free core, its own first (a free core has no one waiting: give() hands
  // a core on before it frees it).
  int core = -1;
  if (!busy_[home] && queue_of(home).empty()) {
    core = home;
  } else {
    for (std::size_t c = 0; c < busy_.size() && core < 0; ++c) {
      if (!busy_[c] && queue_of(static_cast<int>(c)).empty()) core = static_cast<int>(c);
    }
  }
  if (core < 0) {
    Queue& q = queue_of(home);
    const sg4::SemaphorePtr mine = sg4::Semaphore::create(0);
    (woken ? q.woken : q.queued).push_back({mine, who});
    mine->acquire();  // give() hands it a core
    core = got_.at(who);
  }
  busy_[core] = true;
  last_[who] = core;
  return core;
}

void Cores::hand(int core, Queue& from) {
  std::deque<Waiter>& next = !from.woken.empty() ? from.woken : from.queued;
  const Waiter w = next.front();
  next.pop_front();
  got_[w.who] = core;  // busy all along: no other rank takes it meanwhile
  w.handed->release();
}

void Cores::give(int core, bool blocking) {
  if (!queue_of(core).empty()) return hand(core, queue_of(core));
  if (affine_ && blocking) {
    // An idle core pulls a rank waiting on another: a woken one first.
    for (Queue& q : queues_) {
      if (!q.woken.empty()) return hand(core, q);
    }
    for (Queue& q : queues_) {
      if (!q.empty()) return hand(core, q);
    }
  }
  busy_[core] = false;
}

bool Cores::woken_waiting(int core) const { return !queue_of(core).woken.empty(); }

}  // namespace pipetwin::sim
