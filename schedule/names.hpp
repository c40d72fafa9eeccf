// NameTable: an enum's names, written once. Parsing, printing, error messages
// and the command line's lists of allowed values all read the same table, so
// a new value is one new row.
//
//   constexpr NameTable<Recompute, 3> kRecompute{"recompute policy",
//       {{{Recompute::None, "none"}, {Recompute::Full, "full"}, {Recompute::ExceptLast, "except-last"}}}};
//   kRecompute.parse("full")  -> Recompute::Full
//   kRecompute.parse("half")  -> throws "unknown recompute policy 'half' (valid: none, full, except-last)"
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "schedule/error.hpp"

namespace pipetwin::schedule {

template <typename Enum, std::size_t N>
struct NameTable {
  std::string_view what;  // "recompute policy": what an error calls a value
  std::array<std::pair<Enum, std::string_view>, N> rows;

  std::string_view name(Enum value) const {
    for (const auto& [v, n] : rows) {
      if (v == value) return n;
    }
    return "?";
  }
  // Throws pipetwin::Error naming the value and every valid one.
  Enum parse(std::string_view text) const {
    for (const auto& [v, n] : rows) {
      if (n == text) return v;
    }
    throw Error("unknown " + std::string(what) + " '" + std::string(text) + "' (valid: " + joined() + ")");
  }
  bool contains(std::string_view text) const {
    for (const auto& row : rows) {
      if (row.second == text) return true;
    }
    return false;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& row : rows) out.emplace_back(row.second);
    return out;
  }
  std::string joined(std::string_view separator = ", ") const {
    std::string out;
    for (const auto& row : rows) out += (out.empty() ? "" : std::string(separator)) + std::string(row.second);
    return out;
  }
};

}  // namespace pipetwin::schedule
