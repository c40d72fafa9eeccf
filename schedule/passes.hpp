// Lowering passes, each a pure function Program -> Program:
//
//   generator (F/B/I/W) --insert_recomputes--> +R --insert_transfers--> +SEND/RECV
//                       --insert_optimizer_step--> +STEP  == a complete program
//
// Transfers are asynchronous sends and blocking receives: a SEND is posted right
// after the compute that produced its tensor, a RECV right before the compute
// that consumes it.
#pragma once

#include "schedule/program.hpp"

namespace pipetwin::schedule {

// Adds R(s, m) right before the backward (B or I) of every micro-batch that the
// recompute policy checkpoints, unless the program already holds R actions.
Program insert_recomputes(Program program);

// Adds SEND_F/RECV_F and SEND_B/RECV_B wherever adjacent stages live on
// different ranks, unless the program already holds transfers.
Program insert_transfers(Program program);

// Appends one STEP per stage at the end of each rank's list, unless the program
// already holds STEP actions (pipedream steps after every backward).
Program insert_optimizer_step(Program program);

// All three, in order.
Program lower(Program program);

// Data parallelism (D > 1): a REDUCE_GRAD(s) right after the last backward (B
// or W) of stage s before each of its STEPs, unless the program already holds
// a REDUCE_GRAD of that stage (a PyTorch CSV's own). The reduction runs asynchronously from there, over what
// follows on the rank (the cool-down's other stages), and its STEP waits for it.
Program insert_gradient_reductions(Program program);

// FSDP's actions as PyTorch's runtime lowers its multi-stage schedules
// (_add_unshard_reshard): walking each rank's compute actions (an
// OVERLAP_F_B as one, R as its stage's compute), before each one the stages
// among the next `max_active_stages` distinct ones to compute that are not
// gathered get an UNSHARD (in the order they come), after a RESHARD of each
// gathered stage not among them; a RESHARD of every stage still gathered
// ends the list. Each goes right before the receives that stand before its
// compute (which wait for their data there). A program that holds FSDP
// actions already is returned as it is. Throws pipetwin::Error for
// `max_active_stages` < 1.
Program insert_unshards(Program program, int max_active_stages);
// True when some rank holds an UNSHARD or a RESHARD.
bool holds_fsdp_actions(const Program& program);

// Receives as PyTorch's runtime means them: a RECV_F or RECV_B in its CSV
// posts the receive, and the rank waits for the data right before the
// compute that uses it (F of the same stage and micro-batch for RECV_F; its
// B or I for RECV_B). Each receive that stands before its consumer on its
// rank moves to just before it (in the order they stood); one with no
// consumer after it stays where it is, for validate to name. `moved`, when
// given, gets how many moved past another action.
Program receive_at_use(Program program, int* moved = nullptr);

}  // namespace pipetwin::schedule
