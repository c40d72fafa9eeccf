// Channel order: transports that pair messages by issue order and ignore tags
// (NCCL) need every (sender rank -> receiver rank) channel to receive in the
// order it sends. Tagged transports (Gloo) and the simulator do not.
//
//   rank 0: ... 0SEND_F0 ... 0SEND_F1 ...      channel 0 -> 1 carries F0, F1
//   rank 1: ... 1RECV_F1 ... 1RECV_F0 ...      received as F1, F0: out of order
#pragma once

#include "schedule/program.hpp"

namespace pipetwin::schedule {

// Throws ScheduleError naming the receiving rank, its step and action, and
// the message the channel delivers there instead.
void check_in_order_channels(const Program& program);

}  // namespace pipetwin::schedule
