// Megatron-LM's pipeline layout, read as megatron/core/transformer/
// pipeline_parallel_layer_layout.py reads it (parse_str_to_list: commas
// dropped, "(...)*n" then "x*n" unrolled, stages split at '|').
#include "models/layout.hpp"

#include <regex>

#include "schedule/error.hpp"

namespace pipetwin::models {

namespace {

constexpr std::string_view kLayoutChars = "EtLm|()*,0123456789 ";

bool is_embedding(LayerKind k) { return k == LayerKind::Embedding || k == LayerKind::LlmEmbedding; }
bool is_head(LayerKind k) { return k == LayerKind::LmHead || k == LayerKind::LlmHead || k == LayerKind::ClassifierHead; }

std::string unrolled(std::string text, const std::regex& pattern, std::string_view layout) {
  std::string out;
  std::size_t done = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it) {
    const auto& m = *it;
    out += text.substr(done, static_cast<std::size_t>(m.position()) - done);
    const long n = std::stol(m.str(2));
    if (n > 100000) throw Error("pipeline layout '" + std::string(layout) + "': repeat count " + m.str(2) + " is too large");
    for (long i = 0; i < n; ++i) out += m.str(1);
    done = static_cast<std::size_t>(m.position() + m.length());
  }
  return out + text.substr(done);
}

}  // namespace

bool is_layout(std::string_view text) {
  if (text.empty() || text.find_first_not_of(kLayoutChars) != std::string_view::npos) return false;
  return text.find('E') != std::string_view::npos || text.find('|') != std::string_view::npos;
}

std::vector<std::string> expand_layout(std::string_view text) {
  std::string s;
  for (const char c : text) {
    if (c != ',' && c != ' ') s += c;
  }
  static const std::regex group(R"(\(([^)]+)\)\*(\d+))"), single(R"((.)\*(\d+))");
  s = unrolled(unrolled(s, group, text), single, text);
  std::vector<std::string> stages(1);
  for (const char c : s) {
    if (c == '|') {
      stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'L' || c == 'm') {
      stages.back() += c;
    } else {
      throw Error("pipeline layout '" + std::string(text) + "': invalid character '" + std::string(1, c) + "' in stage " +
                  std::to_string(stages.size() - 1) + " (E embedding, t decoder layer, L loss, | between stages, x*n and (...)*n repeats)");
    }
  }
  return stages;
}

std::vector<schedule::LayerRange> layout_ranges(const Model& model, std::string_view text) {
  const auto stages = expand_layout(text);
  const std::string where = "pipeline layout '" + std::string(text) + "'";
  int have[3] = {0, 0, 0}, want[3] = {0, 0, 0};  // E, t, L
  for (const auto& stage : stages) {
    for (const char c : stage) have[c == 'E' ? 0 : c == 'L' ? 2 : 1] += c != 'm';
  }
  for (const auto& l : model.layers) ++want[is_embedding(l.kind) ? 0 : is_head(l.kind) ? 2 : 1];
  if (have[0] != want[0] || have[1] != want[1] || have[2] != want[2]) {
    throw Error(where + " spells " + std::to_string(have[0]) + " E, " + std::to_string(have[1]) + " t and " +
                std::to_string(have[2]) + " L; " + model.name + " has " + std::to_string(want[0]) + " embedding, " +
                std::to_string(want[1]) + " blocks and " + std::to_string(want[2]) + " head");
  }
  std::vector<schedule::LayerRange> ranges;
  int next = 0;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::string& stage = stages[s];
    if (stage.empty()) throw Error(where + ": stage " + std::to_string(s) + " is empty; each pipetwin stage holds a layer at least");
    const int begin = next;
    for (const char c : stage) {
      if (c == 'm') throw Error(where + ": stage " + std::to_string(s) + " has a multi-token prediction layer (m), which " + model.name + " has none of");
      const Layer& l = model.layers[next];
      const bool fits = c == 'E' ? is_embedding(l.kind) : c == 'L' ? is_head(l.kind) : !is_embedding(l.kind) && !is_head(l.kind);
      if (!fits) {
        throw Error(where + ": stage " + std::to_string(s) + "'s '" + std::string(1, c) + "' falls on " + model.name +
                    "'s layer " + std::to_string(next) + ", " + l.name + " (" + std::string(kind_name(l.kind)) +
                    "); the layout must spell the model's layers in order: E for its embedding, t for each block, L for its head");
      }
      ++next;
    }
    ranges.push_back({begin, next});
  }
  return ranges;
}

}  // namespace pipetwin::models
