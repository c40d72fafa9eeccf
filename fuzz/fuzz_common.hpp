// Shared by the libFuzzer harnesses: a parser may refuse its input only with
// pipetwin::Error; anything else (another exception, a crash, a sanitizer
// report, a hang) is a bug. Programs that parse are validated too, when small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "schedule/error.hpp"
#include "schedule/program.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::fuzz {

inline std::string text_of(const uint8_t* data, size_t size) { return std::string(reinterpret_cast<const char*>(data), size); }

inline void validate_if_small(const schedule::Program& p) {
  const long long slots = static_cast<long long>(p.num_ranks) * p.stages_per_rank * p.num_microbatches;
  if (p.num_ranks > 64 || p.stages_per_rank > 8 || p.num_microbatches > 256 || slots > 20000 || p.num_actions() > 50000) return;
  try {
    schedule::validate(p);
  } catch (const Error&) {
  }
}

}  // namespace pipetwin::fuzz
