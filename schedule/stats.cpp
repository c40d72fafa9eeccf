// Robust statistics (see stats.hpp).
#include "schedule/stats.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace pipetwin::schedule {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double mad(const std::vector<double>& values, double about) {
  std::vector<double> dev;
  dev.reserve(values.size());
  for (const double v : values) dev.push_back(std::abs(v - about));
  return median(std::move(dev));
}

std::size_t median_index(const std::vector<double>& values, std::size_t first) {
  std::vector<std::size_t> order;
  for (std::size_t i = first; i < values.size(); ++i) order.push_back(i);
  if (order.empty()) return first;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  return order[(order.size() - 1) / 2];
}

double median_half_width_rel(double quantile, double mad, double median_value, std::size_t n) {
  if (n < 3 || !(median_value > 0)) return 0;
  return quantile * 1.2533 * 1.4826 * mad / std::sqrt(static_cast<double>(n)) / median_value;
}

}  // namespace pipetwin::schedule
