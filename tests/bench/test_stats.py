"""plots/stats.py, the statistics the benchmarks, the plots and the demo's
report share, against values worked out by hand. Standard library only."""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plots"))
import stats  # noqa: E402


class StatsTest(unittest.TestCase):
    def test_median_of_odd_and_even_counts(self):
        self.assertEqual(stats.median([3, 1, 2]), 2)
        self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)  # the mean of the two middle ones
        self.assertEqual(stats.median(x for x in (7.0,)), 7.0)  # any iterable
        with self.assertRaises(ValueError):
            stats.median([])

    def test_mad_is_the_median_distance_to_the_median(self):
        # median 3; distances 2, 1, 0, 1, 97 -> 1: the outlier does not move it
        self.assertEqual(stats.mad([1, 2, 3, 4, 100]), 1)
        self.assertEqual(stats.mad([5, 5, 5]), 0)

    def test_spread_of_repeats(self):
        self.assertAlmostEqual(stats.spread([90, 100, 110]), 0.2)
        self.assertEqual(stats.spread([5]), 0.0)

    def test_quartiles_and_iqr(self):
        self.assertEqual(stats.quartiles(range(1, 9)), (2.25, 4.5, 6.75))
        self.assertAlmostEqual(stats.iqr_rel(range(1, 9)), 1.0)  # (6.75 - 2.25) / 4.5

    def test_percentile_interpolates_between_sorted_values(self):
        self.assertEqual(stats.percentile([5, 1, 4, 2, 3], 25), 2)
        self.assertEqual(stats.percentile([10, 20], 50), 15)
        self.assertEqual(stats.percentile([3, 9, 1], 0), 1)
        self.assertEqual(stats.percentile([3, 9, 1], 100), 9)
        with self.assertRaises(ValueError):
            stats.percentile([1, 2], 101)

    def test_interval_of_a_median(self):
        # five runs, median 100, MAD 1, t(4) = 2.776
        runs = [100, 99, 101, 102, 98]
        h = 2.776 * 1.2533 * 1.4826 * 1 / math.sqrt(5) / 100
        self.assertAlmostEqual(stats.median_half_width(runs), h)
        low, high = stats.median_interval(runs)
        self.assertAlmostEqual(low, 100 * (1 - h))
        self.assertAlmostEqual(high, 100 * (1 + h))
        self.assertEqual(stats.median_half_width([1, 2]), math.inf)  # below three runs: not known
        self.assertEqual(stats.t975(1), 12.706)
        self.assertAlmostEqual(stats.t975(30), 1.96 + 2.4 / 30)


if __name__ == "__main__":
    unittest.main()
