// SimGridPool: SimGrid replays in child processes, `jobs` at a time (SimGrid
// runs one engine per process). Sweep and plan hand it their configurations
// that need SimGrid; it starts them as slots free, reads each child's output
// as it comes (poll, no sleep) and reports each result as it finishes.
//
//   add(id, make) ... add(id, make)  -> run(on_done)  -> on_done(id, result | error), in finishing order
//
// Each input is made when its slot frees, not before: every replay forks this
// process, whose size its fork copies, so it holds only the inputs in flight.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>

#include "sim/simulator.hpp"

namespace pipetwin::twin {

class SimGridPool {
 public:
  explicit SimGridPool(int jobs);

  // `make` returns the input to replay, or nothing where the configuration
  // is settled without SimGrid (it reported it itself); a pipetwin::Error it
  // throws is reported as that id's error.
  using Make = std::function<std::optional<sim::SimInput>()>;
  void add(std::size_t id, Make make);

  // Replays everything added, calling `done` with the id and the result, or
  // with nullptr and the error's message where the replay failed; `done` may
  // add more. Throws pipetwin::Error only where the pool itself fails (poll).
  using Done = std::function<void(std::size_t id, const sim::SimResult* result, const std::string& error)>;
  void run(const Done& done);

 private:
  struct Queued {
    std::size_t id;
    Make make;
  };
  int jobs_;
  std::deque<Queued> todo_;
};

}  // namespace pipetwin::twin
