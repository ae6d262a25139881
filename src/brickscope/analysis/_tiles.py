# SPDX-License-Identifier: Apache-2.0
"""Tile statistics (``bs.tile``): per level, and per (scope name, level), from the table's
``tile_<level>_*`` columns: count, time, elements, throughput. No span per tile exists:
each scope's span carries its tiles' totals, and these are sums of those."""

from __future__ import annotations

from brickscope.analysis._model import TileStats
from brickscope.analysis._table import Table
from brickscope.trace.attributes import TILE_LEVELS


def tiles(table: Table) -> tuple[TileStats, ...]:
    """Every level with tiles (outermost first), then each (name, level), most time first."""
    be = table.backend
    sums = {}
    for level in TILE_LEVELS:
        counts = table[f"tile_{level}_count"]
        if not be.count_true(be.mask_not(be.mask_in(counts, [0]))):
            continue
        groups = len(table.operations)
        sums[level] = tuple(
            be.group_sum(table["op"], groups, table[f"tile_{level}_{what}"]) for what in ("count", "ns", "elements")
        )
    return tiles_of(table, sums)


def tiles_of(table: Table, sums: dict[str, tuple[list[int], list[int], list[int]]]) -> tuple[TileStats, ...]:
    """The section from the sums per op code (count, ns, elements) of each level some span has tiles of."""
    overall, per_name = [], []
    for level in TILE_LEVELS:
        if level not in sums:
            continue
        count, total, elements = sums[level]
        overall.append(_stats(level, "", sum(count), sum(total), sum(elements)))
        for code, n in enumerate(count):
            if n:
                per_name.append(_stats(level, table.operations[code].name, n, total[code], elements[code]))
    per_name.sort(key=lambda s: (-s.total_ns, s.name, TILE_LEVELS.index(s.level)))
    return tuple(overall + per_name)


def _stats(level: str, name: str, count: int, total_ns: int, elements: int) -> TileStats:
    return TileStats(
        level=level,
        name=name,
        count=int(count),
        total_ns=int(total_ns),
        mean_ns=total_ns / count if count else 0.0,
        elements=int(elements),
        elements_per_second=elements / (total_ns / 1e9) if total_ns and elements else 0.0,
    )
