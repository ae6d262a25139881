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

from bisect import bisect_left, bisect_right
from collections.abc import Callable

_NEG_INF = -(1 << 63)


def _no_pause() -> None:
    """The pace of a caller nobody waits for."""


class _Node:
    """One slice of non-zero length in a lane's nesting forest."""

    __slots__ = ("start", "end", "batch", "children", "size")

    def __init__(self, start: int, end: int, batch: int = 0) -> None:
        self.start = start
        self.end = end
        self.batch = batch  # the writer's batch it was placed in (rule 4)
        # Sorted by start, pairwise disjoint; None for a leaf (most nodes: saves a list each).
        self.children: list[_Node] | None = None
        self.size = 1  # nodes in this subtree, itself included


def _start(node: _Node) -> int:
    return node.start


class Lane:
    """One Perfetto track's set of placed slices, kept as a nesting forest."""

    __slots__ = ("_root", "_starts", "sealed_until_ns")

    def __init__(self) -> None:
        self._root = _Node(_NEG_INF, -_NEG_INF)
        self._root.children = []
        self._root.size = 0
        # start -> number of non-zero slices starting there (rule 3 is global).
        self._starts: dict[int, int] = {}
        self.sealed_until_ns = _NEG_INF

    @property
    def size(self) -> int:
        """Slices of non-zero length the lane currently remembers."""
        return self._root.size

    def try_place(self, start: int, end: int, batch: int = 0) -> bool:
        """Place ``[start, end]`` of the writer's batch ``batch`` if the rules allow it;
        returns whether it was placed."""
        if start == end:
            return True  # zero-length slices never conflict and need no memory
        if start < self.sealed_until_ns:
            return False
        if end in self._starts:
            return False  # rule 3
        path = [self._root]
        node = self._root
        while True:
            children = node.children
            if children is None:
                children = node.children = []
            i = bisect_right(children, start, key=_start) - 1
            if i >= 0 and children[i].end > start:
                child = children[i]
                if child.end > end or (child.end == end and child.batch == batch):
                    path.append(child)
                    node = child  # S nests inside this child: descend
                    continue
                return False  # rule 2 (child starts with S, ends first), rule 1 or rule 4
            lo = i + 1
            hi = bisect_left(children, end, lo=lo, key=_start)
            if hi > lo and children[hi - 1].end > end:
                return False  # rule 1: a child starts inside S and outlives it
            new = _Node(start, end, batch)
            if hi > lo:
                new.children = children[lo:hi]
                new.size = 1 + sum(c.size for c in new.children)
            children[lo:hi] = [new]
            break
        for ancestor in path:
            ancestor.size += 1
        self._starts[start] = self._starts.get(start, 0) + 1
        return True

    def shrink(self, keep: int, pace: Callable[[], None] = _no_pause) -> None:
        """Forget the oldest top-level subtrees until at most ``keep`` slices remain,
        calling ``pace`` after each forgotten slice."""
        children = self._root.children
        drop = 0
        while self._root.size > keep and drop < len(children):
            node = children[drop]
            self._root.size -= node.size
            self.sealed_until_ns = max(self.sealed_until_ns, node.end)
            drop += 1
        forgotten = children[:drop]
        del children[:drop]
        self._forget(forgotten, pace)

    def _forget(self, stack: list[_Node], pace: Callable[[], None]) -> None:
        """Take the subtrees' starts out of the rule-3 table and free them node by node
        (dropping a whole subtree at once frees it in one uninterruptible call)."""
        while stack:
            n = stack.pop()
            left = self._starts[n.start] - 1
            if left:
                self._starts[n.start] = left
            else:
                del self._starts[n.start]
            if n.children:
                stack.extend(n.children)
                n.children = None
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
