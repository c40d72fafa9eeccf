// Timeline statistics.
#include "schedule/timeline.hpp"

#include <algorithm>

namespace pipetwin::schedule {

double Timeline::makespan() const {
  double end = 0;
  for (const auto& rank : ranks) {
    for (const auto& t : rank) end = std::max(end, t.end);
  }
  return end;
}

double Timeline::busy(RankId r) const {
  double total = 0;
  for (const auto& t : ranks.at(r.value)) {
    if (is_compute(t.action.op)) total += t.end - t.start;
  }
  return total;
}

double Timeline::idle_fraction(RankId r) const {
  const double span = makespan();
  return span > 0 ? 1.0 - busy(r) / span : 0.0;
}

std::vector<double> Timeline::idle_fractions() const {
  const double span = makespan();
  std::vector<double> idle;
  idle.reserve(ranks.size());
  for (int r = 0; r < static_cast<int>(ranks.size()); ++r) idle.push_back(span > 0 ? 1.0 - busy(RankId{r}) / span : 0.0);
  return idle;
}

double Timeline::bubble_fraction() const {
  if (ranks.empty()) return 0;
  double sum = 0;
  for (const double idle : idle_fractions()) sum += idle;
  return sum / static_cast<double>(ranks.size());
}

}  // namespace pipetwin::schedule
