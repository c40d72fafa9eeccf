// For tests that check an error's message: what a call threw as
// pipetwin::Error, or "" when it threw nothing.
#pragma once

#include <functional>
#include <string>

#include "schedule/error.hpp"

namespace pipetwin::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace pipetwin::test
