"""The statistics the benchmarks, the plots and the demo's report share: the
median, the median absolute deviation, the relative spread of repeats, the
inter-quartile range, percentiles and the 95% interval of a median.

Standard library only. Importable as `stats` with plots/ on sys.path (the
plots' scripts have it there as their own folder; scripts/ and the bench
package put it there).

    import stats; stats.median([3, 1, 2]); stats.median_half_width(steps)
"""
import math
import statistics

# Student's t at 97.5% for 1..20 degrees of freedom.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)


def median(values) -> float:
    """The median of `values` (the mean of the two middle ones of an even
    count). Raises ValueError on none."""
    values = list(values)
    if not values:
        raise ValueError("median of no values")
    return statistics.median(values)


def mad(values) -> float:
    """The median absolute deviation from the median (unscaled)."""
    values = list(values)
    m = median(values)
    return median(abs(v - m) for v in values)


def spread(values) -> float:
    """(max - min) / median of repeats: 0 for fewer than two."""
    values = list(values)
    if len(values) < 2:
        return 0.0
    return (max(values) - min(values)) / median(values)


def quartiles(values) -> tuple:
    """The first, second and third quartiles (statistics.quantiles' exclusive
    method); needs two values or more."""
    q = statistics.quantiles(list(values), n=4)
    return q[0], q[1], q[2]


def iqr_rel(values) -> float:
    """The inter-quartile range over the median."""
    values = list(values)
    q1, _, q3 = quartiles(values)
    return (q3 - q1) / median(values)


def percentile(values, p: float) -> float:
    """The p-th percentile (0..100), linear between the sorted values."""
    values = sorted(values)
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} outside 0..100")
    at = (len(values) - 1) * p / 100
    lo = math.floor(at)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (at - lo)


def t975(dof: int) -> float:
    """Student's t at 97.5% for `dof` degrees of freedom (an approximation past 20)."""
    if dof < 1:
        raise ValueError(f"t of {dof} degrees of freedom")
    return T975[dof - 1] if dof <= len(T975) else 1.96 + 2.4 / dof


def median_half_width(values) -> float:
    """95% half-width of the median of `values`, relative to it; inf below 3
    values (`pipetwin compare --repeats`'s: t(n-1) x 1.2533 x 1.4826 x MAD /
    sqrt(n) / median)."""
    values = list(values)
    n = len(values)
    if n < 3:
        return math.inf
    return t975(n - 1) * 1.2533 * 1.4826 * mad(values) / math.sqrt(n) / median(values)


def median_interval(values) -> tuple:
    """The 95% interval (low, high) of the median of `values`, in their unit."""
    m = median(values)
    h = median_half_width(values)
    return m * (1 - h), m * (1 + h)
