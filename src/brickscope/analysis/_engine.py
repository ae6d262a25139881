# SPDX-License-Identifier: Apache-2.0
"""analyse(): a loaded table, filtered, into a :class:`~brickscope.analysis._model.Report`."""

from __future__ import annotations

from brickscope.analysis import (
    _communication,
    _graph,
    _host,
    _memory,
    _operations,
    _placement,
    _roofline,
    _stalls,
    _tiles,
)  # fmt: skip
from brickscope.analysis._load import AnalysisError
from brickscope.analysis._model import Report
from brickscope.analysis._peaks import Peak
from brickscope.analysis._table import CLOCKS, KIND_BRICK, KIND_KERNEL, Table
from brickscope.offline import describe_steps


def analyse(
    table: Table,
    *,
    top: int = 10,
    steps: tuple[int | None, int | None] | None = None,
    ranks: list[str] | None = None,
    devices: list[int] | None = None,
    peaks: dict[str, Peak] | None = None,
    comm_min_ratio: float = _communication.MIN_RATIO,
    memory_min_share: float = _memory.HOTSPOT_SHARE,
) -> Report:
    """Every section of the report, computed from ``table``.

    Args:
        top: how many slowest instances and outliers to list.
        steps: keep spans of steps ``start <= step < stop`` (either end None: open);
            spans outside any step are left out.
        ranks: keep these ranks (labels as in the report).
        devices: keep GPU-timed spans of these device ordinals.
        peaks: device-name substring (or ``"*"``) -> Peak, before the built-in table.
        comm_min_ratio: the smallest share of its kind's self time that makes a communication
            operation a bottleneck, in [0, 1].
        memory_min_share: the smallest share of its kind's bytes that makes an operation a
            memory hotspot, in [0, 1].

    Raises:
        AnalysisError: a filter names a rank or device the trace lacks, or leaves no
            brick or kernel span.
        ValueError: ``comm_min_ratio`` or ``memory_min_share`` is not in [0, 1].
    """
    for name, value in (("comm_min_ratio", comm_min_ratio), ("memory_min_share", memory_min_share)):
        if not 0 <= value <= 1:  # NaN fails too
            raise ValueError(f"{name} {value}: expected a number between 0 and 1")
    table, filters = select(table, steps=steps, ranks=ranks, devices=devices)
    be = table.backend
    found = _operations.find_stalls(table)
    operations = _operations.operations(table, found)
    device_lanes = _placement.devices(table)
    rank_lanes = _placement.ranks(table)
    bricks = be.mask_in(table["kind"], (KIND_BRICK,))
    clock_counts = be.group_count(be.compress(table["clock"], bricks), len(CLOCKS))
    return Report(
        sources=tuple(table.sources),
        spans=table.rows,
        dropped=table.dropped + sum(table.impossible.values()),
        dropped_by_reason={**({"bound": table.dropped} if table.dropped else {}), **table.impossible},
        clocks=tuple(name for name, count in zip(CLOCKS, clock_counts) if count),
        filters=filters,
        operations=operations,
        categories=_operations.categories(table, found),
        slowest=_operations.slowest(table, top),
        outliers=_operations.outliers(table, top),
        devices=device_lanes,
        ranks=rank_lanes,
        load_balance={"devices": _placement.balance(device_lanes), "ranks": _placement.balance(rank_lanes)},
        communication=_communication.communication(table, operations, comm_min_ratio),
        memory=_memory.memory(table, memory_min_share),
        roofline=_roofline.roofline(table, peaks),
        throughput=_placement.throughput(table),
        notes=tuple(table.notes),
        tiles=_tiles.tiles(table),
        critical_paths=_graph.critical_paths(table, slowest=top),
        host=_host.host_time(table),
        stalls=_stalls.stalls(table, found, top),
    )


def select(
    table: Table,
    *,
    steps: tuple[int | None, int | None] | None = None,
    ranks: list[str] | None = None,
    devices: list[int] | None = None,
) -> tuple[Table, dict[str, str]]:
    """The rows the filters keep (arguments as :func:`analyse`), and the filters as text.

    Raises:
        AnalysisError: a filter names a rank or device the trace lacks, or leaves no
            brick or kernel span.
    """
    be = table.backend
    filters: dict[str, str] = {}
    mask = None
    if steps is not None:
        low, high = steps
        mask = _and(be, mask, be.mask_range(table["step"], max(low or 0, 0), high))
        filters["step"] = describe_steps(steps)
    if ranks:
        unknown = [r for r in ranks if r not in table.ranks]
        if unknown:
            raise AnalysisError(f"no rank {', '.join(unknown)} in the trace (ranks: {', '.join(table.ranks)})")
        mask = _and(be, mask, be.mask_in(table["rank"], [table.ranks.index(r) for r in ranks]))
        filters["rank"] = ",".join(ranks)
    if devices:
        codes = [code for code, device in enumerate(table.devices) if device.ordinal in devices]
        if not codes:
            present = sorted({d.ordinal for d in table.devices})
            raise AnalysisError(
                f"no GPU device {', '.join(map(str, devices))} in the trace"
                f" (devices: {', '.join(map(str, present)) or 'none; it was timed on the host clock'})"
            )
        mask = _and(be, mask, be.mask_in(table["device"], codes))
        filters["device"] = ",".join(map(str, devices))
    if mask is not None:
        table = table.select(mask)
        _require_match(be.count_true(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL))), filters)
    return table, filters


def _require_match(work: int, filters: dict[str, str]) -> None:
    """Refuse filters that leave ``work`` = 0 brick and kernel spans."""
    if not work:
        described = " ".join(f"--{key} {value}" for key, value in filters.items())
        raise AnalysisError(f"no brick or kernel span matches {described}")


def _and(be, mask, other):  # type: ignore[no-untyped-def]
    return other if mask is None else be.mask_and(mask, other)
