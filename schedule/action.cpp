// Text form of actions: "<stage><op>[<micro-batch>]".
#include "schedule/action.hpp"

#include <array>
#include <cctype>
#include <charconv>

#include "schedule/error.hpp"

namespace pipetwin::schedule {
namespace {

struct OpName {
  Op op;
  std::string_view name;
};

// The parser reads the whole [A-Z_]+ run and looks it up exactly.
constexpr std::array<OpName, 13> kOps{{
    {Op::REDUCE_GRAD, "REDUCE_GRAD"},
    {Op::SEND_F, "SEND_F"},
    {Op::RECV_F, "RECV_F"},
    {Op::SEND_B, "SEND_B"},
    {Op::RECV_B, "RECV_B"},
    {Op::STEP, "STEP"},
    {Op::UNSHARD, "UNSHARD"},
    {Op::RESHARD, "RESHARD"},
    {Op::F, "F"},
    {Op::B, "B"},
    {Op::I, "I"},
    {Op::W, "W"},
    {Op::R, "R"},
}};

bool parse_int(std::string_view digits, int& out) {
  if (digits.empty() || digits.size() > 9) return false;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return ec == std::errc() && ptr == digits.data() + digits.size();
}

}  // namespace

std::string_view op_name(Op op) {
  for (const auto& entry : kOps) {
    if (entry.op == op) return entry.name;
  }
  return "?";
}

std::optional<Op> op_from_name(std::string_view name) {
  for (const auto& entry : kOps) {
    if (entry.name == name) return entry.op;
  }
  return std::nullopt;
}


Action make_action(Op op, int stage, int microbatch) {
  return Action{op, StageId{stage}, MicrobatchId{microbatch}};
}

Action make_stage_action(Op op, int stage) { return Action{op, StageId{stage}, std::nullopt}; }

std::string to_string(const Action& action) {
  std::string text = std::to_string(action.stage.value);
  text += op_name(action.op);
  if (action.microbatch) text += std::to_string(action.microbatch->value);
  return text;
}

namespace {
// At most `n` characters of what the input said, for a message.
std::string clipped(std::string_view text, std::size_t n = 60) {
  return text.size() <= n ? std::string(text)
                          : std::string(text.substr(0, n)) + "... (" + std::to_string(text.size()) + " characters)";
}
}  // namespace

Action parse_action(std::string_view text) {
  const std::string quoted = "'" + clipped(text) + "'";
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  std::size_t j = i;
  while (j < text.size() && (std::isupper(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
  int stage = 0;
  if (!parse_int(text.substr(0, i), stage)) {
    throw Error("invalid action " + quoted + ": expected <stage><op>[<micro-batch>], e.g. 2F0 or 3SEND_F1");
  }
  const auto op = op_from_name(text.substr(i, j - i));
  if (!op) {
    throw Error("invalid action " + quoted + ": unknown op '" + clipped(text.substr(i, j - i)) +
                "' (valid: F B I W R SEND_F RECV_F SEND_B RECV_B REDUCE_GRAD STEP)");
  }
  const std::string_view rest = text.substr(j);
  if (rest.empty()) {
    if (!is_stage_level(*op)) {
      throw Error("invalid action " + quoted + ": op " + std::string(op_name(*op)) + " needs a micro-batch");
    }
    return make_stage_action(*op, stage);
  }
  int microbatch = 0;
  if (!parse_int(rest, microbatch)) {
    throw Error("invalid action " + quoted + ": trailing '" + clipped(rest) + "' is not a micro-batch number");
  }
  return make_action(*op, stage, microbatch);
}

std::size_t group_begin(const std::vector<Action>& actions, std::size_t i) {
  while (i > 0 && actions[i].overlapped) --i;
  return i;
}

std::size_t group_end(const std::vector<Action>& actions, std::size_t i) {
  ++i;
  while (i < actions.size() && actions[i].overlapped) ++i;
  return i;
}

std::optional<std::size_t> backward_before(const std::vector<Action>& actions, std::size_t i) {
  for (std::size_t k = i; k-- > 0;) {
    if ((actions[k].op == Op::B || actions[k].op == Op::W) && actions[k].stage == actions.at(i).stage) return k;
  }
  return std::nullopt;
}

std::vector<std::string> to_cells(const std::vector<Action>& actions) {
  std::vector<std::string> cells;
  cells.reserve(actions.size());
  for (std::size_t i = 0; i < actions.size();) {
    const std::size_t end = group_end(actions, i);
    if (end == i + 1) {
      cells.push_back(to_string(actions[i]));
    } else {
      std::string cell = "(";
      for (std::size_t k = i; k < end; ++k) cell += (k > i ? ";" : "") + to_string(actions[k]);
      cells.push_back(cell + ")" + std::string(kOverlapName));
    }
    i = end;
  }
  return cells;
}

std::vector<Action> parse_cell(std::string_view cell) {
  if (cell.empty() || cell.front() != '(') return {parse_action(cell)};
  const auto close = cell.find(')');
  if (close == std::string_view::npos || cell.substr(close + 1) != kOverlapName) {
    throw Error("invalid action '" + clipped(cell) + "': expected (<action>;<action>)OVERLAP_F_B");
  }
  std::vector<Action> subs;
  std::string_view inside = cell.substr(1, close - 1);
  while (true) {
    const auto semi = inside.find(';');
    std::string_view sub = inside.substr(0, semi);
    while (!sub.empty() && (sub.front() == ' ' || sub.front() == '\t')) sub.remove_prefix(1);
    while (!sub.empty() && (sub.back() == ' ' || sub.back() == '\t')) sub.remove_suffix(1);
    Action a;
    try {
      a = parse_action(sub);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + ", in '" + clipped(cell) + "'");
    }
    if (!is_compute(a.op) || a.op == Op::R) {
      throw Error("OVERLAP_F_B holds " + to_string(a) + ": its sub-actions are forwards and backwards (F, B, I, W)");
    }
    a.overlapped = !subs.empty();
    subs.push_back(a);
    if (semi == std::string_view::npos) break;
    inside.remove_prefix(semi + 1);
  }
  if (subs.size() < 2) {
    throw Error("OVERLAP_F_B '" + clipped(cell) + "' holds " + std::to_string(subs.size()) + " action, expected two or more");
  }
  return subs;
}

}  // namespace pipetwin::schedule
