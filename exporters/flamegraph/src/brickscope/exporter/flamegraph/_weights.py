# SPDX-License-Identifier: Apache-2.0
"""What a span weighs in the chosen clock, and how children cover a parent.

Example::

    weight = Weight.parse("gpu")
    extent = weight.extent(span)          # (start_ns, end_ns), or None: no GPU time
    cover = weight.new_cover()
    cover.add(child_extent)
    self_ns = weight.size(extent) - cover.within(extent)

Three kinds of weight, one per flamegraph:

- ``"gpu"``: GPU-timed spans (``brickscope.clock`` ``"cuda"`` or ``"gpu"``, with
  ``brickscope.gpu.duration_ns``); the extent is the GPU interval
  ``[start_time, start_time + gpu.duration_ns]``.
- ``"host"``: the host interval ``[brickscope.host.start_ns, + host.duration_ns]``
  when the span carries it, else the span's own start and end, unless the span
  is GPU-timed (its own start and end are then GPU times, never mixed in).
- any other string: a numeric span attribute (int or float, finite and >= 0),
  read as the span's *inclusive* amount, like a duration.

A span without the chosen weight has no extent: it still appears as a frame
(its weighted descendants hang below it) but weighs nothing itself.

Self weight is the extent minus what the span's nearest weighted descendants
cover of it. For times, that is the *union* of the children's intervals clipped
to the parent, so children running at once on different streams are not
subtracted twice and a child sticking out of its parent takes only its inside
part. For an attribute it is the parent's value minus the sum of its children's,
never below zero.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from brickscope.trace import attributes as A

__all__ = ["IntervalCover", "SumCover", "Weight"]

#: Names of the time weights; anything else names an attribute.
GPU = "gpu"
HOST = "host"


class IntervalCover:
    """A union of [start, end) intervals, kept as sorted disjoint runs."""

    __slots__ = ("_starts", "_ends")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, extent: tuple[int, int]) -> None:
        """Add an interval to the union."""
        start, end = extent
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        if not ends or start > ends[-1]:  # the common case: children arrive in time order
            starts.append(start)
            ends.append(end)
            return
        first = bisect_left(ends, start)  # runs that end at or after our start...
        last = bisect_right(starts, end)  # ...and begin at or before our end touch us
        if first == last:
            starts.insert(first, start)
            ends.insert(first, end)
            return
        starts[first:last] = [min(start, starts[first])]
        ends[first:last] = [max(end, ends[last - 1])]

    def add_within(self, extent: tuple[int, int], parent: tuple[int, int]) -> int:
        """Add an interval; returns how much of ``parent`` it newly covers."""
        start, end = max(extent[0], parent[0]), min(extent[1], parent[1])
        newly = 0 if end <= start else (end - start) - self.within((start, end))
        self.add(extent)
        return newly

    def within(self, parent: tuple[int, int]) -> int:
        """How much of ``parent`` the union covers."""
        lo, hi = parent
        starts, ends = self._starts, self._ends
        first, last = bisect_right(ends, lo), bisect_left(starts, hi)
        return sum(max(0, min(ends[i], hi) - max(starts[i], lo)) for i in range(first, last))

    def merge(self, other: IntervalCover) -> None:
        """Add every interval of another cover."""
        for extent in zip(other._starts, other._ends, strict=True):
            self.add(extent)

    def extents(self) -> list[tuple[int, int]]:
        """The disjoint intervals, in time order."""
        return list(zip(self._starts, self._ends, strict=True))


class SumCover:
    """A running total of the children's amounts."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total: float = 0

    def add(self, amount: float) -> None:
        self.total += amount

    def add_within(self, amount: float, parent: float) -> float:
        before = min(self.total, parent)
        self.total += amount
        return min(self.total, parent) - before

    def within(self, parent: float) -> float:
        return min(self.total, parent)

    def merge(self, other: SumCover) -> None:
        self.total += other.total

    def extents(self) -> list[float]:
        return [self.total] if self.total else []


class Weight:
    """The chosen weight: how to read a span's extent and how children cover it."""

    __slots__ = ("name", "is_time", "_attribute")

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_time = name in (GPU, HOST)
        self._attribute = None if self.is_time else name

    @classmethod
    def parse(cls, name: Any) -> Weight:
        """Validate a weight name: ``"gpu"``, ``"host"`` or an attribute key."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(
                f"weight must be 'gpu', 'host' or a numeric span attribute name, got {name!r}"
            )
        return cls(name.strip())

    def extent(self, span: ReadableSpan) -> Any:
        """The span's extent in this weight, or None when it has none."""
        attributes = span.attributes or {}
        if self.name == GPU:
            duration = attributes.get(A.GPU_DURATION_NS)
            start = span.start_time
            if attributes.get(A.CLOCK) not in A.GPU_CLOCKS or type(duration) is not int:
                return None
            if duration < 0 or start is None:
                return None
            return (start, start + duration)
        if self.name == HOST:
            start, duration = attributes.get(A.HOST_START_NS), attributes.get(A.HOST_DURATION_NS)
            if type(start) is int and type(duration) is int and duration >= 0:
                return (start, start + duration)
            if attributes.get(A.CLOCK) in A.GPU_CLOCKS:
                return None  # its start/end are GPU times: never mixed into host time
            if span.start_time is None or span.end_time is None or span.end_time < span.start_time:
                return None
            return (span.start_time, span.end_time)
        value = attributes.get(self._attribute)
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            return None
        return value

    def size(self, extent: Any) -> float:
        """The full amount of an extent (a duration, or the attribute value)."""
        return extent[1] - extent[0] if self.is_time else extent

    def start(self, extent: Any, span: ReadableSpan) -> int:
        """When the extent begins (orders samples on a timeline)."""
        return extent[0] if self.is_time else (span.start_time or 0)

    def new_cover(self) -> IntervalCover | SumCover:
        return IntervalCover() if self.is_time else SumCover()
