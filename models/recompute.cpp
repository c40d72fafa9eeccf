// Recompute choices: the policy's names plus Megatron-LM's layer methods.
#include "models/recompute.hpp"

#include <charconv>

#include "schedule/error.hpp"

namespace pipetwin::models {

namespace {

// The N after "uniform:" or "block:"; `fallback` where none is written (0: required).
int layer_count(std::string_view text, std::string_view method, int fallback) {
  const std::string_view rest = text.substr(method.size());
  if (rest.empty()) {
    if (fallback > 0) return fallback;
    throw Error("recompute '" + std::string(text) + "' needs its layer count: " + std::string(method) + ":N");
  }
  int n = 0;
  const auto digits = rest.substr(1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (rest.front() != ':' || digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || n < 1) {
    throw Error("recompute '" + std::string(text) + "': the layer count after '" + std::string(method) +
                ":' must be a positive integer");
  }
  return n;
}

bool starts(std::string_view text, std::string_view word) {
  return text.substr(0, word.size()) == word && (text.size() == word.size() || text[word.size()] == ':');
}

}  // namespace

RecomputeChoice parse_recompute_choice(std::string_view text) {
  RecomputeChoice c;
  if (starts(text, "uniform")) {
    c.policy = schedule::RecomputePolicy::Full;
    c.checkpoint = {Checkpoint::Uniform, layer_count(text, "uniform", 1)};
    return c;
  }
  if (starts(text, "block")) {
    c.policy = schedule::RecomputePolicy::Full;
    c.checkpoint = {Checkpoint::Block, layer_count(text, "block", 0)};
    return c;
  }
  if (text == "op") {
    c.policy = schedule::RecomputePolicy::Selective;
    c.checkpoint = {Checkpoint::Op, 0};
    return c;
  }
  try {
    c.policy = schedule::parse_recompute(text);
  } catch (const Error&) {
    throw Error("unknown recompute policy '" + std::string(text) + "' (valid: " + recompute_choices() + ")");
  }
  return c;
}

std::string recompute_choice_name(const RecomputeChoice& c) {
  switch (c.checkpoint.method) {
    case Checkpoint::Uniform: return "uniform:" + std::to_string(c.checkpoint.layers);
    case Checkpoint::Block: return "block:" + std::to_string(c.checkpoint.layers);
    case Checkpoint::Op: return "op";
    case Checkpoint::Stage: break;
  }
  return std::string(schedule::recompute_name(c.policy));
}

std::string recompute_choices() {
  std::string out;
  for (const auto& n : schedule::recompute_names()) out += n + ", ";
  return out + "uniform[:N], block:N, op";
}

}  // namespace pipetwin::models
