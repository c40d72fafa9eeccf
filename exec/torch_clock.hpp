// Times a rank's actions on rank 0's clock (internal to exec/: includes
// LibTorch): host time on the CPU, CUDA events on GPUs.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "exec/torch_comm.hpp"

namespace pipetwin::exec {

// Times actions on rank 0's clock: host time on the CPU, CUDA events on GPUs.
class ActionClock {
 public:
  virtual ~ActionClock() = default;
  virtual void begin_step() = 0;
  virtual std::size_t start() = 0;
  virtual void stop(std::size_t token) = 0;
  // (start, end) of every token since begin_step().
  virtual std::vector<std::pair<double, double>> resolve() = 0;
};
std::unique_ptr<ActionClock> make_clock(const Comm& comm, bool cuda);

}  // namespace pipetwin::exec
