// Channel order: transports that pair messages by issue order and ignore tags
// (NCCL) need every channel to receive in the order it sends. A channel is a
// (sender rank -> receiver rank) pair and a kind, activations (SEND_F/RECV_F)
// or gradients (SEND_B/RECV_B): the executor gives each kind its own process
// group, since V-shaped and zero-bubble schedules interleave a pair's
// activations and gradients differently on its two ends. Tagged transports
// (Gloo) and the simulator need no order.
//
//   rank 0: ... 0SEND_F0 ... 0SEND_F1 ...      channel 0 -> 1 (F) carries F0, F1
//   rank 1: ... 1RECV_F1 ... 1RECV_F0 ...      received as F1, F0: out of order
#pragma once

#include "schedule/program.hpp"

namespace pipetwin::schedule {

// Throws ScheduleError naming the receiving rank, its step and action, and
// the message the channel delivers there instead.
void check_in_order_channels(const Program& program);

}  // namespace pipetwin::schedule
