// Robust statistics shared by the executor's noise record and the
// calibration: the median, and the 95% interval of a median of a few draws.
#pragma once

#include <cstddef>
#include <vector>

namespace pipetwin::schedule {

// 0 of none; of an even count, the mean of the middle two.
double median(std::vector<double> values);

// The index of the median one of values[first, end): of an even count the
// lower of the middle two (a step that ran, as a run's trace holds it);
// `first` where there are none.
std::size_t median_index(const std::vector<double>& values, std::size_t first = 0);

// The median absolute deviation of `values` about `about` (their median); 0 of none.
double mad(const std::vector<double>& values, double about);

// The half-width of the 95% interval of the median of `n` draws whose median
// absolute deviation is `mad` (the normal's: 1.4826 MAD is its sd, 1.2533 sd
// / sqrt(n) its median's), times `quantile` (1.96, or Student's t for few
// draws), relative to `median_value`; 0 for fewer than 3 draws or a median of 0.
double median_half_width_rel(double quantile, double mad, double median_value, std::size_t n);

}  // namespace pipetwin::schedule
