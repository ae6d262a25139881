# SPDX-License-Identifier: Apache-2.0
"""Per-operation and per-category statistics, the slowest instances, outliers.

Definitions (``docs/analysis.md`` has the formulas, and the stall rule): an instance's time is its
self time (a brick's duration minus the bricks nested in it; a kernel's
duration), so nested bricks are never counted twice; ``total_ns`` also gives the
inclusive sum of durations. Percentiles are exact, nearest-rank
(:func:`~brickscope.analysis._backend.nearest_rank`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from brickscope.analysis._model import Instance, OperationStats, Outlier
from brickscope.analysis._stats import nearest_rank
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table

PERCENTILES = (0.5, 0.9, 0.99)
#: An instance is an outlier when its duration exceeds this many times its
#: operation's median, and the operation has at least OUTLIER_MIN_COUNT instances.
OUTLIER_FACTOR = 3.0
OUTLIER_MIN_COUNT = 3
#: A stall: an instance whose self time exceeds max(STALL_FACTOR x its operation's median,
#: median + STALL_MADS x MAD), MAD the median absolute deviation from the median, in an
#: operation of at least STALL_MIN_COUNT instances. The factor keeps a tight operation's
#: ordinary jitter out, the MAD term a widely spread operation's long tail.
STALL_FACTOR = 5.0
STALL_MADS = 5.0
STALL_MIN_COUNT = 5


def operations(table: Table, found: Any = None) -> tuple[OperationStats, ...]:
    """Bricks (by self time, largest first), then kernels (likewise), each with the stalls
    among its instances (``found``: :func:`~brickscope.analysis._stalls.find_stalls` of
    ``table``, computed here when None)."""
    names = [(op.name, op.kind, op.category) for op in table.operations]
    found = found if found is not None else find_stalls(table)
    stats = _group_stats(table, table["op"], names, table, found.by_group(found.work["op"]))
    out = []
    for kind in ("brick", "kernel"):
        rows = [s for s in stats if s.kind == kind]
        out.extend(with_shares(rows))
    return tuple(out)


def categories(table: Table, found: Any = None) -> tuple[OperationStats, ...]:
    """Bricks grouped by category, by self time, largest first; a category's stalls are
    its bricks' (``found`` as for :func:`operations`)."""
    be = table.backend
    bricks = table.select(be.mask_in(table["kind"], (KIND_BRICK,)))
    names = [(name, "category", name) for name in table.categories]
    found = found if found is not None else find_stalls(table)
    work = found.work
    # kernels carry their brick's category too: only brick stalls count for a category
    brick_rows = [r for r, kind in zip(found.rows, be.take(work["kind"], found.rows)) if kind == KIND_BRICK]
    stalled = replace(found, rows=brick_rows).by_group(work["category"])
    return tuple(with_shares(_group_stats(bricks, bricks["category"], names, bricks, stalled)))


@dataclass(frozen=True)
class Found:
    """The stall rule applied to a table: its bricks and kernels, each operation's median
    and threshold (by op code), and the rows of ``work`` that are stalls."""

    work: Table
    medians: list[int]
    thresholds: list[float]
    rows: list[int]

    def by_group(self, codes: Any) -> tuple[dict[int, int], dict[int, int]]:
        """Stall count and stall self time per code of ``codes`` (a column of ``work``)."""
        be = self.work.backend
        count: dict[int, int] = {}
        total: dict[int, int] = {}
        for code, self_ns in zip(be.take(codes, self.rows), be.take(self.work["self"], self.rows)):
            count[code] = count.get(code, 0) + 1
            total[code] = total.get(code, 0) + self_ns
        return count, total


def find_stalls(table: Table) -> Found:
    """Apply the stall rule (:data:`STALL_FACTOR`, :data:`STALL_MADS`) to every brick and
    kernel of ``table``."""
    be = table.backend
    work = table.select(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    groups = len(table.operations)
    codes, self_ns = work["op"], work["self"]
    counts = be.group_count(codes, groups)
    ordered, offsets = be.sorted_within_groups(codes, groups, self_ns)
    medians = pick(be, ordered, offsets, counts, 0.5)
    deviations = be.absolute(be.subtract(self_ns, be.lookup(medians, codes, "int64")))
    ordered, offsets = be.sorted_within_groups(codes, groups, deviations)
    mads = pick(be, ordered, offsets, counts, 0.5)
    thresholds = [
        max(STALL_FACTOR * median, median + STALL_MADS * mad) if count >= STALL_MIN_COUNT else math.inf
        for median, mad, count in zip(medians, mads, counts)
    ]
    return Found(work, medians, thresholds, be.rows_above(codes, self_ns, thresholds))


def slowest(table: Table, top: int) -> tuple[Instance, ...]:
    """The ``top`` brick instances with the most self time; ties by start time, then span id."""
    be = table.backend
    bricks = table.select(be.mask_in(table["kind"], (KIND_BRICK,)))
    rows = be.top_k(bricks["self"], top, (bricks["start"], bricks["span_id"]))
    return tuple(instance(bricks, row) for row in rows)


def outliers(table: Table, top: int) -> tuple[Outlier, ...]:
    """Brick and kernel instances whose self time is above OUTLIER_FACTOR x their operation's
    median, worst ratio first."""
    be = table.backend
    work = table.select(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    groups = len(table.operations)
    codes, durations = work["op"], work["self"]
    counts = be.group_count(codes, groups)
    ordered, offsets = be.sorted_within_groups(codes, groups, durations)
    medians = pick(be, ordered, offsets, counts, 0.5)
    thresholds = [OUTLIER_FACTOR * medians[g] if counts[g] >= OUTLIER_MIN_COUNT else math.inf for g in range(groups)]
    found = []
    for row in be.rows_above(codes, durations, thresholds):
        median = medians[be.item(codes, row)]
        duration = be.item(durations, row)
        found.append(Outlier(instance(work, row), median, duration / median if median else math.inf))
    found.sort(key=lambda o: (-o.ratio, -o.instance.self_ns, o.instance.start_ns, o.instance.span_id))
    return tuple(found[:top])


def instance(table: Table, row: int) -> Instance:
    """Row ``row`` of ``table`` as an Instance (where it ran, how long it took)."""
    be = table.backend
    return make_instance(
        table, *(be.item(table[name], row) for name in ("op", "duration", "self", "start", "step", "layer")),
        *(be.item(table[name], row) for name in ("rank", "device", "stream", "span_id")),
    )  # fmt: skip


def make_instance(
    table: Table, op: int, duration: int, self_ns: int, start: int, step: int, layer: int,
    rank: int, device: int, stream: int, span_id: int,
) -> Instance:  # fmt: skip
    """An Instance from a row's values (codes into ``table``'s lists; -1: absent; the span
    id unsigned), wherever the row was read (the SQL engines read one row at a time)."""
    operation = table.operations[op]
    return Instance(
        name=operation.name,
        kind=operation.kind,
        duration_ns=duration,
        self_ns=self_ns,
        start_ns=start,
        step=step if step >= 0 else None,
        layer=layer if layer >= 0 else None,
        rank=table.ranks[rank],
        device=table.device_label(device) if device >= 0 else None,
        stream=table.stream_label(stream) if stream >= 0 else None,
        span_id=f"{span_id:016x}",
    )


def _group_stats(
    table: Table, codes: Any, names: list[tuple[str, str, str]], rows: Table, stalled: tuple[dict, dict]
) -> list[OperationStats]:
    """Statistics of ``rows`` grouped by ``codes`` (indices into ``names``: (name, kind, category));
    ``stalled``: stall count and stall self time by code (:meth:`Found.by_group`)."""
    stall_count, stall_ns = stalled
    be = table.backend
    groups = len(names)
    count = be.group_count(codes, groups)
    total = be.group_sum(codes, groups, rows["duration"])
    self_ns = be.group_sum(codes, groups, rows["self"])
    elements = be.group_sum(codes, groups, rows["elements"])
    nbytes = be.group_sum(codes, groups, rows["bytes"])
    ordered, offsets = be.sorted_within_groups(codes, groups, rows["self"])
    p50, p90, p99 = (pick(be, ordered, offsets, count, q) for q in PERCENTILES)
    lowest = pick(be, ordered, offsets, count, 0.0)
    highest = pick(be, ordered, offsets, count, 1.0)
    out = []
    for g, (name, kind, category) in enumerate(names):
        if not count[g] or kind not in ("brick", "kernel", "category"):
            continue
        out.append(
            stats_of(
                name,
                kind,
                category,
                count[g],
                total[g],
                self_ns[g],
                elements[g],
                nbytes[g],
                (p50[g], p90[g], p99[g], lowest[g], highest[g]),
                stall_count.get(g, 0),
                stall_ns.get(g, 0),
            )  # fmt: skip
        )
    return out


def stats_of(
    name: str, kind: str, category: str, count: int, total: int, self_ns: int, elements: int, nbytes: int,
    picks: tuple[int, int, int, int, int], stalls: int, stall_ns: int,
) -> OperationStats:  # fmt: skip
    """One group's statistics from its sums and its picks (p50, p90, p99, min, max of the self
    times, :data:`PERCENTILES` then 0 and 1); the share is set by :func:`with_shares`."""
    seconds = self_ns / 1e9
    p50, p90, p99, lowest, highest = picks
    return OperationStats(
        name=name,
        kind=kind,
        category=category,
        count=count,
        total_ns=total,
        self_ns=self_ns,
        share=0.0,
        mean_ns=self_ns / count,
        p50_ns=p50,
        p90_ns=p90,
        p99_ns=p99,
        min_ns=lowest,
        max_ns=highest,
        elements=elements,
        elements_per_second=elements / seconds if seconds and elements else 0.0,
        bytes=nbytes,
        bytes_per_second=nbytes / seconds if seconds and nbytes else 0.0,
        stalls=stalls,
        stall_ns=stall_ns,
        stall_share=stall_ns / self_ns if self_ns else 0.0,
    )


def with_shares(stats: list[OperationStats]) -> list[OperationStats]:
    whole = sum(s.self_ns for s in stats)
    shared = [replace(s, share=s.self_ns / whole if whole else 0.0) for s in stats]
    shared.sort(key=lambda s: (-s.self_ns, s.name))
    return shared


def pick(be: Any, ordered: Any, offsets: list[int], counts: list[int], fraction: float) -> list[int]:
    """Per group, the nearest-rank ``fraction`` percentile of its sorted values (0 for an empty group)."""
    rows = [offsets[g] + nearest_rank(c, fraction) for g, c in enumerate(counts) if c]
    values = iter(be.take(ordered, rows)) if rows else iter(())
    return [next(values) if c else 0 for c in counts]
