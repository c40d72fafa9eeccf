// One step of a rank's program: {op, stage, micro-batch}, with the text form
// `<stage><op><micro-batch>` of torch.distributed.pipelining ("2F0", "3SEND_F1",
// "1R4"). Stage-level ops (STEP, REDUCE_GRAD, UNSHARD, RESHARD) may omit the
// micro-batch ("0STEP").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  // FSDP (ZeRO-3) under a pipeline, as PyTorch's runtime lowers its
  // multi-stage schedules: UNSHARD starts the all-gather of a whole stage's
  // weights (asynchronously; the stage's next compute waits for it), RESHARD
  // frees them. No-ops in time unless the stage's weights are sharded and
  // kept between uses (ZeRO-3, reshard_after_forward off).
  UNSHARD,
  RESHARD,
};

std::string_view op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);

inline bool is_compute(Op op) { return op == Op::F || op == Op::B || op == Op::I || op == Op::W || op == Op::R; }
inline bool is_send(Op op) { return op == Op::SEND_F || op == Op::SEND_B; }
inline bool is_recv(Op op) { return op == Op::RECV_F || op == Op::RECV_B; }
inline bool is_transfer(Op op) { return is_send(op) || is_recv(op); }
inline bool is_fsdp(Op op) { return op == Op::UNSHARD || op == Op::RESHARD; }
// STEP, REDUCE_GRAD, UNSHARD and RESHARD act on a whole stage; their micro-batch is optional.
inline bool is_stage_level(Op op) { return op == Op::STEP || op == Op::REDUCE_GRAD || is_fsdp(op); }

struct Action {
  Op op = Op::F;
  StageId stage;
  std::optional<MicrobatchId> microbatch;
  // Runs overlapped with the compute action right before it on its rank: the
  // two (or more, each after the one before) make one of PyTorch's
  // OVERLAP_F_B, written "(0F3;3B1)OVERLAP_F_B". Only F, B, I and W may be.
  bool overlapped = false;

  friend bool operator==(const Action&, const Action&) = default;
};

Action make_action(Op op, int stage, int microbatch);
Action make_stage_action(Op op, int stage);

// The action alone ("0F3"), whether or not it is overlapped.
std::string to_string(const Action& action);
// Parses the text form; throws pipetwin::Error naming the text on failure.
Action parse_action(std::string_view text);

// An OVERLAP_F_B of a rank's list: actions[begin, end), the first not
// overlapped and each other one overlapped. A lone action is a group of one.
// group_begin(actions, i) and group_end(actions, i) bound the group of action i.
std::size_t group_begin(const std::vector<Action>& actions, std::size_t i);
std::size_t group_end(const std::vector<Action>& actions, std::size_t i);

// The position of the last backward (B or W) of action i's stage before it in
// a rank's list (for a REDUCE_GRAD: the backward its gradient buckets come
// out of), or none.
std::optional<std::size_t> backward_before(const std::vector<Action>& actions, std::size_t i);

// A rank's list as cells: each action alone ("0F3"), each OVERLAP_F_B as
// "(0F3;3B1)OVERLAP_F_B"; and one cell back to its action(s), the second and
// later of an OVERLAP_F_B marked overlapped. Throws pipetwin::Error naming
// the cell; an OVERLAP_F_B holds two or more of F, B, I and W.
std::vector<std::string> to_cells(const std::vector<Action>& actions);
std::vector<Action> parse_cell(std::string_view cell);
inline constexpr std::string_view kOverlapName = "OVERLAP_F_B";

}  // namespace pipetwin::schedule
