// The one exception type for user-facing errors: bad input, impossible shapes,
// broken schedules. `main` catches it and prints its message; nothing else does.
#pragma once

#include <stdexcept>
#include <string>

namespace pipetwin {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace pipetwin
