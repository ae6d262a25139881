# SPDX-License-Identifier: Apache-2.0
"""Communication: which bricks are collectives or transfers, how long they took, and
how much of it compute on the same device hid (overlapped) or did not (exposed).

On each device, with C the union of its GPU-timed communication intervals and K
the union of its other GPU-timed work: overlapped = ``|C n K|`` and exposed =
``|C| - |C n K|``. Host-timed communication is in the totals but has no exposure. A communication
operation whose share of its kind's self time is at least ``min_ratio`` (``brickscope
report --comm-min-ratio``, default :data:`MIN_RATIO`) is a bottleneck: among the bricks, or
the kernels when no brick is communication. What counts as
communication is the table's rule (``is_communication`` in ``_table``: the ``comm`` column).
"""

from __future__ import annotations

from brickscope.analysis._intervals import concat, union_ns
from brickscope.analysis._model import Communication, CommunicationOp, Exposure, OperationStats
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table

#: The default smallest share of its kind's self time that makes a communication operation a bottleneck.
MIN_RATIO = 0.10


def communication(table: Table, operations: tuple[OperationStats, ...], min_ratio: float = MIN_RATIO) -> Communication:
    """Communication totals per operation (from the per-operation statistics), the bottlenecks
    (operations holding at least ``min_ratio`` of their kind's self time) and exposure per device."""
    return communication_of(table, operations, _exposure(table), min_ratio)


def communication_of(
    table: Table, operations: tuple[OperationStats, ...], devices: tuple[Exposure, ...], min_ratio: float = MIN_RATIO
) -> Communication:
    """The section from the per-operation statistics and the exposure per device (:func:`exposure_of`)."""
    communicating = {(op.kind, op.name, op.category) for op in table.operations if op.communication}
    selves = {kind: sum(s.self_ns for s in operations if s.kind == kind) for kind in ("brick", "kernel")}
    ops = tuple(
        CommunicationOp(
            s.name, s.kind, s.count, s.total_ns, s.self_ns, s.self_ns / selves[s.kind] if selves[s.kind] else 0.0
        )
        for s in operations
        if (s.kind, s.name, s.category) in communicating
    )
    bricks = [op for op in ops if op.kind == "brick"]
    total = sum(op.self_ns for op in bricks)
    return Communication(
        total_ns=total,
        share=total / selves["brick"] if selves["brick"] else 0.0,
        count=sum(op.count for op in bricks),
        operations=ops,
        devices=devices,
        exposed_ns=sum(d.exposed_ns for d in devices),
        overlapped_ns=sum(d.overlapped_ns for d in devices),
        bottlenecks=tuple(op.name for op in (bricks or ops) if op.share >= min_ratio),
        bottleneck_ratio=min_ratio,
    )


def _exposure(table: Table) -> tuple[Exposure, ...]:
    be = table.backend
    gpu = table.select(
        be.mask_and(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)), be.mask_range(table["device"], 0, None))
    )
    n = len(table.devices)
    comm = gpu.select(gpu["comm"])
    compute = gpu.select(be.mask_not(gpu["comm"]))
    c_parts = (comm["device"], comm["start"], comm["end"])
    k_parts = (compute["device"], compute["start"], compute["end"])
    c_ns = union_ns(be, *c_parts, n)
    k_ns = union_ns(be, *k_parts, n)
    both = union_ns(be, *concat(be, c_parts, k_parts), n)
    return exposure_of(table, c_ns, k_ns, both)


def exposure_of(table: Table, comm_ns: list[int], compute_ns: list[int], both_ns: list[int]) -> tuple[Exposure, ...]:
    """Exposure per device from the busy time of its GPU-timed communication, of its other
    GPU-timed work, and of both (lists by device code)."""
    out = []
    for code in range(len(table.devices)):
        if comm_ns[code]:
            overlapped = comm_ns[code] + compute_ns[code] - both_ns[code]
            out.append(Exposure(table.device_label(code), comm_ns[code], overlapped, comm_ns[code] - overlapped))
    return tuple(out)
