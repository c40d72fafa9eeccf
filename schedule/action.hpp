// One step of a rank's program: {op, stage, micro-batch}, with the text form
// `<stage><op><micro-batch>` of torch.distributed.pipelining ("2F0", "3SEND_F1",
// "1R4"). Stage-level ops (STEP, REDUCE_GRAD) may omit the micro-batch ("0STEP").
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "schedule/ids.hpp"

namespace pipetwin::schedule {

enum class Op {
  F,            // forward
  B,            // full backward (input and weight gradients)
  I,            // backward, input gradient only (zero-bubble schedules)
  W,            // backward, weight gradient only
  R,            // recompute the forward of a checkpointed stage
  SEND_F,       // send activations to the next stage
  RECV_F,       // receive activations from the previous stage
  SEND_B,       // send the input gradient to the previous stage
  RECV_B,       // receive the output gradient from the next stage
  REDUCE_GRAD,  // data-parallel gradient all-reduce (reserved)
  STEP,         // optimizer step
};

std::string_view op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);

inline bool is_compute(Op op) { return op == Op::F || op == Op::B || op == Op::I || op == Op::W || op == Op::R; }
inline bool is_send(Op op) { return op == Op::SEND_F || op == Op::SEND_B; }
inline bool is_recv(Op op) { return op == Op::RECV_F || op == Op::RECV_B; }
inline bool is_transfer(Op op) { return is_send(op) || is_recv(op); }
// STEP and REDUCE_GRAD act on a whole stage; their micro-batch is optional.
inline bool is_stage_level(Op op) { return op == Op::STEP || op == Op::REDUCE_GRAD; }

struct Action {
  Op op = Op::F;
  StageId stage;
  std::optional<MicrobatchId> microbatch;

  friend bool operator==(const Action&, const Action&) = default;
};

Action make_action(Op op, int stage, int microbatch);
Action make_stage_action(Op op, int stage);

std::string to_string(const Action& action);
// Parses the text form; throws pipetwin::Error naming the text on failure.
Action parse_action(std::string_view text);

}  // namespace pipetwin::schedule
