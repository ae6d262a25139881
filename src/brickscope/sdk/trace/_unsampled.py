# SPDX-License-Identifier: Apache-2.0
"""Bricks that produce no span (their trace or step was not sampled), folded in bulk.

A sampled brick costs a span; an unsampled one should cost its record and a tiny fold.
On the host clock everything the metrics need is known when the brick ends (its
duration, and its nested bricks', which ended before it), so :meth:`fold_closed` adds
it to per-brick sums right there: the record never waits in the pending queue and is
never resolved. GPU-timed bricks still wait for their events and are folded by the
resolver (:meth:`fold`). At the end of each resolution batch the sums are taken
(:meth:`take`) and handed to the aggregators, one merge per (brick, category): no
per-brick call into the OTel SDK, except the values the ``"all"`` duration histogram
asks for (kept in a list, recorded off the application thread).

Self time is credited exactly as ``SpanBuilder`` does for a span: a brick's duration
goes to the nearest enclosing brick on the scope stack, and is subtracted there.

Example::

    unsampled.fold_closed(rec)          # Recorder.close, host clock, unsampled brick
    sums, values = unsampled.take()     # end of a resolution batch
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from brickscope import _catalog
from brickscope._record import KIND_BRICK, Record, hotpath

_ZERO = (0, 0, 0)
#: (brick name, category as recorded: None for the catalog's) -> (count, self ns, elements)
RawSums = dict[tuple[str, Any], tuple[int, int, int]]


class UnsampledBricks:
    """Per-brick sums of unsampled bricks, handed over at each :meth:`take`.

    Bricks folded where they end go to a table of the thread that ended them, which only
    that thread writes (cumulative tuples, each replaced in one step): no lock on the
    hot path. :meth:`take` reads every table and hands over what grew since it last
    looked; a table whose thread has ended goes once it is handed over. The resolver's
    own folds (:meth:`fold`) go to a table under a lock.

    With the C accelerator (and no values kept) :attr:`on_close` is a
    ``brickscope._hotpath.FoldTable``: the same fold in C into one table of C integers,
    each brick folded under the GIL without calling Python code, so it needs neither a
    lock nor a table per thread; anything it does not handle (a ``record_gpu`` brick,
    sums past 64 bits) goes to :meth:`fold_closed`.

    Args:
        counts: the pipeline's counters (``self_time_clamped``).
        keep_values: also keep each brick's self time, for a histogram of every brick.
    """

    def __init__(self, counts: dict[str, int], keep_values: bool = False) -> None:
        self._counts = counts
        self.keep_values = keep_values
        self._values: deque[tuple[str, Any, int]] = deque()  # append and popleft: thread-safe
        self._lock = threading.Lock()  # the list of tables, the resolver's table
        self._sums: RawSums = {}
        self._local = threading.local()
        self._tables: list[tuple[threading.Thread, RawSums]] = []
        self._handed: dict[int, RawSums] = {}  # id(table) -> what take() handed over of it
        self._table = None if hotpath is None or keep_values else hotpath.FoldTable(counts, self.fold_closed)
        #: What ``Recorder.close`` calls with a host-timed unsampled brick that just ended:
        #: the C table when there is one, else :meth:`fold_closed`.
        self.on_close = self.fold_closed if self._table is None else self._table

    def fold_closed(self, rec: Record) -> None:
        """A host-timed unsampled brick that just ended, on the thread that ended it.

        :func:`self_time` written out: this runs once per brick."""
        owner = rec.owner
        duration = rec.gpu_last - rec.gpu_first if owner._external else rec.host_end - rec.host_start
        enclosing = rec.link
        while enclosing is not None and enclosing.owner._kind != KIND_BRICK:
            enclosing = enclosing.link
        if enclosing is not None:
            enclosing.nested_ns += duration
        self_ns = duration - rec.nested_ns
        if self_ns < 0:
            self._counts["self_time_clamped"] += 1
            self_ns = 0
        try:
            table = self._local.table
        except AttributeError:
            table = self._new_table()
        key = (owner._name, owner._category)
        count, total, elems = table.get(key, _ZERO)
        table[key] = (count + 1, total + self_ns, elems + owner._elements)
        if self.keep_values:
            self._values.append((owner._name, owner._category, self_ns))

    def _new_table(self) -> RawSums:
        table: RawSums = {}
        self._local.table = table
        with self._lock:
            self._tables.append((threading.current_thread(), table))
        return table

    def fold(self, name: str, category: str | None, self_ns: int, elements: int) -> None:
        """One unsampled brick's self time and elements (``category`` None: the catalog's)."""
        key = (name, category)
        with self._lock:
            count, total, elems = self._sums.get(key, _ZERO)
            self._sums[key] = (count + 1, total + self_ns, elems + elements)
        if self.keep_values:
            self._values.append((name, category, self_ns))

    def take(self) -> tuple[dict[tuple[str, str], tuple[int, int, int]], list[tuple[str, str, int]]]:
        """The sums (and values) folded since the last call, by (brick, category) as the
        metrics label them; both empty when nothing was folded. One caller at a time
        (the resolver's lock)."""
        with self._lock:
            raw, self._sums = self._sums, {}
            tables = list(self._tables)
        if self._table is not None:
            for key, (count, total, elems) in self._table.take().items():
                c, t, e = raw.get(key, _ZERO)
                raw[key] = (c + count, t + total, e + elems)
        for thread, table in tables:
            ended = not thread.is_alive()  # read first: an ended thread writes no more
            handed = self._handed.setdefault(id(table), {})
            for key, now in list(table.items()):  # one step: values are replaced whole
                before = handed.get(key, _ZERO)
                if now != before:
                    handed[key] = now
                    count, total, elems = raw.get(key, _ZERO)
                    raw[key] = (count + now[0] - before[0], total + now[1] - before[1], elems + now[2] - before[2])
            if ended:
                with self._lock:
                    self._tables.remove((thread, table))
                del self._handed[id(table)]
        values = []
        while self._values:
            values.append(self._values.popleft())
        sums: dict[tuple[str, str], tuple[int, int, int]] = {}
        labels: dict[tuple[str, Any], tuple[str, str]] = {}
        for (name, category), (count, total, elems) in raw.items():
            info = _catalog.resolve(name, category)
            key = labels[(name, category)] = (info.name, info.category)
            c, t, e = sums.get(key, _ZERO)
            sums[key] = (c + count, t + total, e + elems)
        return sums, [(*_label(labels, name, category), self_ns) for name, category, self_ns in values]

    def forget_after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent's may have been held at fork) and
        nothing of the parent's bricks (the parent reports them)."""
        self._lock = threading.Lock()
        self._sums = {}
        self._values = deque()
        self._local = threading.local()
        self._tables, self._handed = [], {}
        if self._table is not None:
            self._table.clear()


def _label(labels: dict[tuple[str, Any], tuple[str, str]], name: str, category: Any) -> tuple[str, str]:
    """(name, category) as the metrics label them, for a value whose sums were taken."""
    found = labels.get((name, category))
    if found is None:
        info = _catalog.resolve(name, category)
        found = labels[(name, category)] = (info.name, info.category)
    return found


def self_time(rec: Record, duration: int, counts: dict[str, int]) -> int:
    """rec's duration minus its nested bricks'; credits rec to its enclosing brick.

    The scope stack, not the OTel parent, decides nesting, so a brick nested through a
    user span is still subtracted. Children end (and resolve) before their parents.
    """
    enclosing = rec.link
    while enclosing is not None and enclosing.owner._kind != KIND_BRICK:
        enclosing = enclosing.link
    if enclosing is not None:
        enclosing.nested_ns += duration
    self_ns = duration - rec.nested_ns
    if self_ns < 0:  # nested bricks overlapped on several streams
        counts["self_time_clamped"] += 1
        self_ns = 0
    return self_ns
