# SPDX-License-Identifier: Apache-2.0
"""Memory traffic per operation, from the optional ``bytes`` (or ``output_shape`` and
``dtype``) scope attributes.

The total counts bricks when any brick carries bytes, else kernels (a brick's
bytes usually include its kernels'). An operation is a hotspot when it holds at
least ``min_share`` of its kind's bytes (``brickscope report --memory-min-share``, default
:data:`HOTSPOT_SHARE`).
"""

from __future__ import annotations

from brickscope.analysis._model import Instance, Memory, MemoryOp
from brickscope.analysis._operations import instance
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table

HOTSPOT_SHARE = 0.10


def memory(table: Table, min_share: float = HOTSPOT_SHARE) -> Memory:
    """Bytes per operation, the peak instance, and the hotspots at ``min_share`` and above."""
    be = table.backend
    carrying = table.select(
        be.mask_and(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)), be.mask_range(table["bytes"], 1, None))
    )
    n = len(table.operations)
    count = be.group_count(carrying["op"], n)
    total = be.group_sum(carrying["op"], n, carrying["bytes"])
    largest = be.group_max(carrying["op"], n, carrying["bytes"])
    peak_rows = be.top_k(carrying["bytes"], 1, (carrying["start"], carrying["span_id"]))
    peak = instance(carrying, peak_rows[0]) if peak_rows else None
    peak_bytes = be.item(carrying["bytes"], peak_rows[0]) if peak_rows else 0
    return memory_of(table, count, total, largest, peak, peak_bytes, min_share)


def memory_of(
    table: Table, count: list[int], total: list[int], largest: list[int], peak: Instance | None, peak_bytes: int,
    min_share: float,
) -> Memory:  # fmt: skip
    """The section from per-operation sums over the spans that carry bytes (lists by op code:
    count, bytes, largest), and the peak instance with its bytes."""
    per_kind = {
        kind: sum(total[g] for g, op in enumerate(table.operations) if op.kind == kind) for kind in ("brick", "kernel")
    }
    ops = sorted(
        (
            MemoryOp(
                op.name, op.kind, count[g], total[g], total[g] / count[g], largest[g], total[g] / per_kind[op.kind]
            )
            for g, op in enumerate(table.operations)
            if count[g]
        ),
        key=lambda m: (m.kind != "brick", -m.bytes, m.name),
    )
    counted = "brick" if per_kind["brick"] else "kernel"
    return Memory(
        total_bytes=per_kind[counted],
        peak=peak,
        peak_bytes=peak_bytes,
        operations=tuple(ops),
        hotspots=tuple(m.name for m in ops if m.kind == counted and m.share >= min_share),
        hotspot_share=min_share,
    )
