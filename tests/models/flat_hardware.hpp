// A preset's rates with no fixed costs and a flat efficiency, for tests that
// hold a pass's time against a closed form: its FLOPs over half the peak plus
// its traffic over the whole bandwidth.
#pragma once

#include <string>

#include "models/hardware.hpp"

namespace pipetwin::models::testing {

inline Hardware flat(const std::string& preset_name) {
  auto hw = preset(preset_name);
  hw.device.efficiency = {0.5, 0, {}};
  hw.device.op_overhead_s = 0;
  hw.device.memory_efficiency = 1;
  return hw;
}

}  // namespace pipetwin::models::testing
