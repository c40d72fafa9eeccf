// SimGridPool: SimGrid replays in child processes, `jobs` at a time (SimGrid
// runs one engine per process). Sweep and plan hand it their configurations
// that need SimGrid; it starts them as slots free, reads each child's output
// as it comes (poll, no sleep) and reports each result as it finishes.
//
//   add(id, input) ... add(id, input)  -> run(on_done)  -> on_done(id, result | error), in finishing order
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>

#include "sim/simulator.hpp"

namespace pipetwin::twin {

class SimGridPool {
 public:
  explicit SimGridPool(int jobs);

  void add(std::size_t id, sim::SimInput input);
  std::size_t pending() const { return todo_.size(); }

  // Replays everything added, calling `done` with the id and the result, or
  // with nullptr and the error's message where the replay failed; `done` may
  // add more. Throws pipetwin::Error only where the pool itself fails (poll).
  using Done = std::function<void(std::size_t id, const sim::SimResult* result, const std::string& error)>;
  void run(const Done& done);

 private:
  struct Queued {
    std::size_t id;
    sim::SimInput input;
  };
  int jobs_;
  std::deque<Queued> todo_;
};

}  // namespace pipetwin::twin
