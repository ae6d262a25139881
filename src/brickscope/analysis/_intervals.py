# SPDX-License-Identifier: Apache-2.0
"""Interval arithmetic per group (device, stream, rank) on top of the backend's merge.

``union_ns`` is the length of the union of each group's intervals: busy time
counts overlapping work once. Intersections follow from unions:
``|A n B| = |A| + |B| - |A u B|``.
"""

from __future__ import annotations

from typing import Any


def union_ns(be: Any, groups: Any, starts: Any, ends: Any, count: int) -> list[int]:
    """Per group (codes 0..count-1), the length of the union of its intervals."""
    merged_groups, merged_starts, merged_ends = be.merge_intervals(groups, starts, ends)
    return be.group_sum(merged_groups, count, be.subtract(merged_ends, merged_starts))


def concat(be: Any, *parts: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
    """Several (groups, starts, ends) interval sets as one."""
    return tuple(be.concat([part[i] for part in parts], "int64") for i in range(3))
