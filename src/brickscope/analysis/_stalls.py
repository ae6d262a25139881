# SPDX-License-Identifier: Apache-2.0
"""The Stalls section: the stalls that cost most, and what overlapped them.

Which instances are stalls is :func:`~brickscope.analysis._operations.find_stalls`'s rule
(``docs/analysis.md``, "Stalls"). Totals still count stalls (the time was spent): the
operation tables add the share of self time they make up, and this section names them
with what ran on their rank meanwhile.

Example::

    found = find_stalls(table)
    listed = stalls(table, found, top=10)
"""

from __future__ import annotations

import math
from typing import Any

from brickscope.analysis._model import Overlap, Stall
from brickscope.analysis._operations import Found, instance
from brickscope.analysis._table import CLOCK_HOST_CODE, KIND_GC, KIND_OVERHEAD, KINDS, Table

#: Spans of other threads listed per stall, most overlap first.
OTHER_THREADS_LISTED = 3


def stalls(table: Table, found: Found, top: int) -> tuple[Stall, ...]:
    """The ``top`` stalls that cost most over their median (ties: earlier first), each with
    what overlapped it on its rank: GC pauses and brickscope's own work on any thread, and
    host-clock spans of other threads. A stall whose parent is a stall too (a kernel in its
    stalled brick) is not listed on its own: it is the same time."""
    be = found.work.backend
    work = found.work
    codes, self_ns = be.take(work["op"], found.rows), be.take(work["self"], found.rows)
    starts = be.take(work["start"], found.rows)
    order = sorted(
        range(len(found.rows)), key=lambda i: (-(self_ns[i] - found.medians[codes[i]]), starts[i], found.rows[i])
    )
    stalled = set(found.rows)
    parents = be.take(work["parent"], found.rows)
    # a stall inside a stalled span (a kernel in its brick) is that span's: listed once
    order = [i for i in order if parents[i] not in stalled]
    out = []
    for i in order[:top]:
        row, median = found.rows[i], found.medians[codes[i]]
        out.append(
            Stall(
                instance=instance(work, row),
                median_ns=median,
                threshold_ns=int(found.thresholds[codes[i]]),
                ratio=self_ns[i] / median if median else math.inf,
                excess_ns=self_ns[i] - median,
                overlaps=_overlaps(table, work, row),
            )
        )
    return tuple(out)


def _overlaps(table: Table, work: Table, row: int) -> tuple[Overlap, ...]:
    """What ran on the rank of ``work``'s row ``row`` during it (see :func:`stalls`)."""
    be = table.backend
    start, end = be.item(work["start"], row), be.item(work["end"], row)
    rank, thread = be.item(work["rank"], row), be.item(work["thread"], row)
    mask = be.mask_and(
        be.mask_in(table["rank"], (rank,)),
        be.mask_and(be.mask_range(table["start"], None, end), be.mask_range(table["end"], start + 1, None)),
    )
    near = table.select(mask)
    columns = ("op", "kind", "clock", "thread", "start", "end")
    return overlaps_of(table, thread, start, end, zip(*(be.to_list(near[c]) for c in columns)))


def overlaps_of(table: Table, thread: int, start: int, end: int, near: Any) -> tuple[Overlap, ...]:
    """What a stall of ``thread`` from ``start`` to ``end`` lists of the spans ``near`` it on its
    rank: (op, kind, clock, thread, start, end) rows, each overlapping it, in row order."""
    host, others = [], []
    for op, kind, clock, other_thread, other_start, other_end in near:
        overlap = min(end, other_end) - max(start, other_start)
        entry = Overlap(table.operations[op].name, KINDS[kind], other_thread, overlap)
        if kind in (KIND_GC, KIND_OVERHEAD):
            host.append(entry)
        elif clock == CLOCK_HOST_CODE and other_thread and other_thread != thread:
            others.append(entry)
    # most overlap first, then by name
    others.sort(key=lambda o: (-o.overlap_ns, o.name))
    host.sort(key=lambda o: (-o.overlap_ns, o.kind, o.name))
    return tuple(host) + tuple(others[:OTHER_THREADS_LISTED])
