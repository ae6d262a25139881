# SPDX-License-Identifier: Apache-2.0
"""Statistics both analysis backends share: the nearest-rank percentile index and the
Mann-Whitney U test from rank sums (each backend computes the ranks its own way).

Example::

    nearest_rank(100, 0.99)                  # 98: p99 of 100 sorted values is the 99th
    z, p = mann_whitney(5, 5, 15.0, 0.0)     # rank sum 15 of the first sample
"""

from __future__ import annotations

import math


def nearest_rank(count: int, fraction: float) -> int:
    """0-based index of the ``fraction`` percentile among ``count`` sorted values (nearest rank).

    The p-th percentile is the smallest value with at least p% of the values at or
    below it: index ``ceil(p * n) - 1``, so p50 of 4 values is the 2nd, p99 of 100 the 99th.
    """
    return max(0, min(count - 1, math.ceil(fraction * count - 1e-9) - 1))


def mann_whitney(n1: int, n2: int, rank_sum_1: float, tie_term: float) -> tuple[float, float]:
    """(z, two-sided p) of the Mann-Whitney U test, normal approximation with tie and
    continuity corrections, from the rank sum of the first sample and sum(t^3 - t) over ties."""
    n = n1 + n2
    u1 = rank_sum_1 - n1 * (n1 + 1) / 2
    mean = n1 * n2 / 2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:
        return 0.0, 1.0
    delta = u1 - mean
    z = (delta - math.copysign(0.5, delta)) / math.sqrt(variance) if delta else 0.0
    return z, math.erfc(abs(z) / math.sqrt(2))
