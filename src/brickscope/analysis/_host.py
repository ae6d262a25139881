# SPDX-License-Identifier: Apache-2.0
"""brickscope's own work and GC pauses against the wall time, and each step's wall time.

A step's wall time runs from its start to the end of brickscope's work at its end (the
``overhead`` spans carrying its step number, on its rank), or to its own end: resolution
at a step's end runs after the step span closes, and a program waits for it before the
next step, so throughput is tokens over this, not over the step spans alone.

Example::

    walls = step_walls(table)       # {(step, rank): wall ns}
    host = host_time(table)         # HostTime, or None without overhead or gc spans
"""

from __future__ import annotations

from brickscope.analysis._model import HostTime
from brickscope.analysis._table import KIND_GC, KIND_OVERHEAD, KIND_STEP, Table

_COLUMNS = ("step", "rank", "start", "end")


def step_walls(table: Table) -> dict[tuple[int, int, int], int]:
    """Wall ns of each step span, by (step number, rank code, start ns)."""
    steps = _rows(table, KIND_STEP)
    last_end: dict[tuple[int, int], int] = {}
    for step, rank, _start, end in _rows(table, KIND_OVERHEAD):
        if step >= 0 and end > last_end.get((step, rank), 0):
            last_end[(step, rank)] = end
    return {(step, rank, start): max(end, last_end.get((step, rank), end)) - start for step, rank, start, end in steps}


def host_time(table: Table, extents: dict[int, tuple[int, int]] | None = None) -> HostTime | None:
    """brickscope's overhead spans and GC pauses, and their shares of the wall time.

    Args:
        extents: rank code -> (first start, last end) of its spans, when ``table`` holds only
            some of them (a SQL engine's step, overhead and GC rows); default: from ``table``.
    """
    overhead, pauses = _rows(table, KIND_OVERHEAD), _rows(table, KIND_GC)
    if not overhead and not pauses:
        return None
    walls = step_walls(table)
    if walls:
        wall = sum(walls.values())
        stepped = {(step, rank) for step, rank, _ in walls}
        inside = [end - start for step, rank, start, end in overhead if (step, rank) in stepped]
        outside = sum(end - start for step, rank, start, end in overhead if (step, rank) not in stepped)
    else:  # no steps: the trace's extent on each rank
        extents = extents if extents is not None else _extents(table)
        wall = sum(high - low for low, high in extents.values())
        inside, outside = [end - start for _, _, start, end in overhead], 0
    gc_ns = sum(end - start for _, _, start, end in pauses)
    return HostTime(
        wall_ns=wall,
        steps=bool(walls),
        brickscope_count=len(inside),
        brickscope_ns=sum(inside),
        brickscope_share=sum(inside) / wall if wall else 0.0,
        brickscope_outside_ns=outside,
        gc_count=len(pauses),
        gc_ns=gc_ns,
        gc_share=gc_ns / wall if wall else 0.0,
    )


def _extents(table: Table) -> dict[int, tuple[int, int]]:
    be = table.backend
    extents: dict[int, tuple[int, int]] = {}
    for rank, start, end in zip(*(be.to_list(table[name]) for name in ("rank", "start", "end"))):
        low, high = extents.get(rank, (start, end))
        extents[rank] = (min(low, start), max(high, end))
    return extents


def _rows(table: Table, kind: int) -> list[tuple[int, int, int, int]]:
    """(step, rank, start, end) of the spans of one kind."""
    be = table.backend
    chosen = table.select(be.mask_in(table["kind"], (kind,)))
    return list(zip(*(be.to_list(chosen[name]) for name in _COLUMNS)))
