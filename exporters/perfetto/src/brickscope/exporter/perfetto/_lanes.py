# SPDX-License-Identifier: Apache-2.0
"""Lane assignment: which Perfetto track each slice goes on, so nesting is proper.

Example::

    lanes = LaneSet()
    lanes.place(0, 100)    # -> 0: the logical track itself
    lanes.place(10, 20)    # -> 0: nested inside the first slice
    lanes.place(50, 150)   # -> 1: overlaps the first slice partially, so overflow

Perfetto pairs BEGIN and END events per track with a stack: an END closes the
most recent open slice. The trace processor sorts events by timestamp and keeps
file order for equal timestamps, so a slice written in a later batch sorts after
every earlier event at the same timestamp. A slice can go on a lane only if,
under that order, every END on the lane still closes its own slice. Writing the
events of one batch sorted by ``(ts, insertion order)``, except that ENDs at one
timestamp go innermost first (and placing the slices of a batch in ``(start, -end)``
order) makes batch-mates behave almost like slices of earlier batches, and four
pairwise rules decide, for a new slice ``S=[s, e]``
against any slice ``X=[a, b]`` already on the lane (only slices of non-zero length
matter: a zero-length slice opens and closes at once and can never be closed by
another slice's END):

1. partial overlap (``a < s < b < e`` or ``s < a < e < b``) conflicts;
2. ``a == s`` and ``b < e``: S opens on top of X and X's END would close S;
3. ``a == e`` (and ``s < e``): X opens before S's END, which would close X;
4. ``b == e``, S nested in X, and X written in an earlier batch: X's END comes first
   in the file at that timestamp and would close S (batch-mates ending together are
   fine: the writer puts their ENDs innermost first).

A slice that fits no lane goes on a new overflow lane: nothing is dropped.

Memory stays bounded: each lane keeps a forest of its slices (the nesting tree),
and when the writer's budget is exceeded the oldest top-level subtrees are
forgotten. The lane then accepts only slices that start at or after the end of
everything it forgot (``sealed_until_ns``); older late-comers go to another lane.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

_NEG_INF = -(1 << 63)
#: The latest time a lane can hold (Perfetto timestamps are unsigned 64-bit).
MAX_TIME_NS = (1 << 64) - 1


def _no_pause() -> None:
    """The pace of a caller nobody waits for."""


class Lane:
    """One Perfetto track's set of placed slices, kept as a nesting forest.

    The forest is stored in columns indexed by node number (node 0 is the root, which
    spans all time): start, end, batch and subtree size in unsigned 64-bit arrays (slice
    times are in ``0 .. 2**64 - 1``, as Perfetto's), each node's children as a tuple of
    node numbers sorted by start (None for a leaf; the root's, which change most, in a
    list). Python's cyclic garbage collector does not look inside an array and stops
    tracking a tuple of ints at its first collection, so the up to ``max_tracked_slices``
    nodes the writer keeps add a handful of objects to every collection instead of one or
    two per slice: a full collection traverses every tracked object with the interpreter
    held, and an object per slice made each one take tens of milliseconds. Numbers of
    forgotten nodes are reused.
    """

    __slots__ = ("_start", "_end", "_batch", "_size", "_kids", "_free", "_starts", "sealed_until_ns")

    def __init__(self) -> None:
        self._start = array("Q", (0,))  # the root's times are never compared
        self._end = array("Q", (MAX_TIME_NS,))
        self._batch = array("Q", (0,))  # the writer's batch the node was placed in (rule 4)
        self._size = array("Q", (0,))  # nodes in the subtree, itself included (the root: 0)
        # Sorted by start, pairwise disjoint.
        self._kids: list[Any] = [[]]
        self._free: list[int] = []  # numbers of forgotten nodes
        # start -> number of non-zero slices starting there (rule 3 is global).
        self._starts: dict[int, int] = {}
        self.sealed_until_ns = _NEG_INF

    @property
    def size(self) -> int:
        """Slices of non-zero length the lane currently remembers."""
        return self._size[0]

    def try_place(self, start: int, end: int, batch: int = 0) -> bool:
        """Place ``[start, end]`` (``0 <= start <= end <= MAX_TIME_NS``) of the writer's
        batch ``batch`` if the rules allow it; returns whether it was placed."""
        if start == end:
            return True  # zero-length slices never conflict and need no memory
        if start < self.sealed_until_ns:
            return False
        if end in self._starts:
            return False  # rule 3
        ends, kids = self._end, self._kids
        key = self._start.__getitem__
        path = [0]
        node = 0
        while True:
            children = kids[node]
            if children is None:
                children = ()
            i = bisect_right(children, start, key=key) - 1
            if i >= 0 and ends[children[i]] > start:
                child = children[i]
                child_end = ends[child]
                if child_end > end or (child_end == end and self._batch[child] == batch):
                    path.append(child)
                    node = child  # S nests inside this child: descend
                    continue
                return False  # rule 2 (child starts with S, ends first), rule 1 or rule 4
            lo = i + 1
            hi = bisect_left(children, end, lo=lo, key=key)
            if hi > lo and ends[children[hi - 1]] > end:
                return False  # rule 1: a child starts inside S and outlives it
            new = self._new_node(start, end, batch)
            if hi > lo:
                adopted = kids[new] = tuple(children[lo:hi])
                self._size[new] = 1 + sum(map(self._size.__getitem__, adopted))
            if node:
                kids[node] = (*children[:lo], new, *children[hi:])
            else:
                children[lo:hi] = [new]
            break
        sizes = self._size
        for ancestor in path:
            sizes[ancestor] += 1
        self._starts[start] = self._starts.get(start, 0) + 1
        return True

    def shrink(self, keep: int, pace: Callable[[], None] = _no_pause) -> None:
        """Forget the oldest top-level subtrees until at most ``keep`` slices remain,
        calling ``pace`` after each forgotten slice."""
        top = self._kids[0]
        sizes = self._size
        drop = 0
        while sizes[0] > keep and drop < len(top):
            node = top[drop]
            sizes[0] -= sizes[node]
            self.sealed_until_ns = max(self.sealed_until_ns, self._end[node])
            drop += 1
        forgotten = top[:drop]
        del top[:drop]
        self._forget(forgotten, pace)

    def _new_node(self, start: int, end: int, batch: int) -> int:
        if self._free:
            node = self._free.pop()
            self._start[node], self._end[node], self._batch[node], self._size[node] = start, end, batch, 1
            return node
        self._start.append(start)
        self._end.append(end)
        self._batch.append(batch)
        self._size.append(1)
        self._kids.append(None)
        return len(self._start) - 1

    def _forget(self, stack: list[int], pace: Callable[[], None]) -> None:
        """Take the subtrees' starts out of the rule-3 table and free their numbers."""
        starts, kids = self._starts, self._kids
        while stack:
            node = stack.pop()
            start = self._start[node]
            left = starts[start] - 1
            if left:
                starts[start] = left
            else:
                del starts[start]
            children = kids[node]
            if children:
                stack.extend(children)
            kids[node] = None
            self._free.append(node)
            pace()


class LaneSet:
    """The lanes of one logical track (a thread, a GPU stream): lane 0 first."""

    __slots__ = ("lanes",)

    def __init__(self) -> None:
        self.lanes: list[Lane] = [Lane()]

    def place(self, start: int, end: int, batch: int = 0) -> int:
        """Place a slice of the writer's batch ``batch`` on the first lane that takes it (a
        new one if none); returns its index."""
        for index, lane in enumerate(self.lanes):
            if lane.try_place(start, end, batch):
                return index
        lane = Lane()
        lane.try_place(start, end, batch)
        self.lanes.append(lane)
        return len(self.lanes) - 1

    @property
    def size(self) -> int:
        """Slices remembered across all lanes."""
        return sum(lane.size for lane in self.lanes)

    def shrink(self, pace: Callable[[], None] = _no_pause) -> None:
        """Halve what every lane remembers (the writer's memory budget was exceeded)."""
        for lane in self.lanes:
            lane.shrink(lane.size // 2, pace)
