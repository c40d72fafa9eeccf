// Order and time grids.
#include "schedule/grid.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace pipetwin::schedule {
namespace {

constexpr std::size_t kContext = 8;  // rows shown around a mark in a long grid
constexpr std::size_t kShortGrid = 40;

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string render(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows,
                   const std::vector<std::string>& row_labels, const std::vector<bool>& row_marked,
                   const std::vector<bool>& shown) {
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  std::size_t label_width = 4;
  for (const auto& l : row_labels) label_width = std::max(label_width, l.size());
  std::ostringstream out;
  std::string head = pad("", label_width);
  for (std::size_t c = 0; c < header.size(); ++c) head += "  " + pad(header[c], width[c]);
  const std::size_t full = head.size();
  while (!head.empty() && head.back() == ' ') head.pop_back();
  out << head << '\n';
  bool skipping = false;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (!shown[r]) {
      if (!skipping) out << pad("...", label_width) << '\n';
      skipping = true;
      continue;
    }
    skipping = false;
    std::string line = pad(row_labels[r], label_width);
    for (std::size_t c = 0; c < header.size(); ++c) line += "  " + pad(rows[r][c], width[c]);
    if (row_marked[r]) {
      line = pad(line, full) + "  <-- ERROR HERE";
    } else {
      while (!line.empty() && line.back() == ' ') line.pop_back();
    }
    out << line << '\n';
  }
  return out.str();
}

std::vector<std::string> rank_header(int ranks) {
  std::vector<std::string> header;
  for (int r = 0; r < ranks; ++r) header.push_back("rank " + std::to_string(r));
  return header;
}

}  // namespace

std::string format_order_grid(const Program& p, const std::vector<GridMark>& marks) {
  std::size_t steps = 0;
  for (const auto& actions : p.ranks) steps = std::max(steps, actions.size());
  for (const auto& m : marks) steps = std::max(steps, m.step + 1);
  std::vector<std::vector<std::string>> rows(steps, std::vector<std::string>(p.ranks.size()));
  std::vector<std::string> labels(steps);
  std::vector<bool> marked(steps, false), shown(steps, steps <= kShortGrid);
  for (std::size_t i = 0; i < steps; ++i) {
    labels[i] = "step " + std::to_string(i);
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
      if (i < p.ranks[r].size()) rows[i][r] = to_string(p.ranks[r][i]);
    }
  }
  for (const auto& m : marks) {
    if (m.rank.value < 0 || m.rank.value >= static_cast<int>(p.ranks.size())) continue;
    auto& cell = rows[m.step][m.rank.value];
    cell = ">" + (cell.empty() ? std::string("(missing)") : cell) + "<";
    marked[m.step] = true;
    const std::size_t lo = m.step > kContext ? m.step - kContext : 0;
    for (std::size_t i = lo; i < std::min(steps, m.step + kContext + 1); ++i) shown[i] = true;
  }
  return render(rank_header(p.num_ranks), rows, labels, marked, shown);
}

std::string format_time_grid(const Program& p, const Timeline& timeline) {
  const auto slots = static_cast<std::size_t>(std::ceil(timeline.makespan() - 1e-9));
  std::vector<std::vector<std::string>> rows(slots, std::vector<std::string>(p.num_ranks, "."));
  std::vector<std::string> labels(slots);
  for (std::size_t t = 0; t < slots; ++t) labels[t] = "t=" + std::to_string(t);
  for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
    for (const auto& ta : timeline.ranks[r]) {
      if (!is_compute(ta.action.op) || ta.end <= ta.start) continue;
      const auto first = static_cast<std::size_t>(std::floor(ta.start + 1e-9));
      const auto last = static_cast<std::size_t>(std::ceil(ta.end - 1e-9));
      for (std::size_t t = first; t < last && t < slots; ++t) rows[t][r] = to_string(ta.action);
    }
  }
  return render(rank_header(p.num_ranks), rows, labels, std::vector<bool>(slots, false),
                std::vector<bool>(slots, true));
}

}  // namespace pipetwin::schedule
