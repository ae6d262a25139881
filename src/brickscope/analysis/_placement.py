# SPDX-License-Identifier: Apache-2.0
"""Where the time went: per device, per stream and per rank busy and idle time,
load balance, and throughput per step.

Work intervals are brick and kernel spans. A device's are its GPU-timed ones; a
rank's are its GPU-timed ones when it has any, else its host-timed ones (a
host-timed kernel is a launch, not GPU work). Busy = length of the union of the
intervals; idle in steps = length of the rank's step spans not covered by work,
``|work u steps| - |work|``.
"""

from __future__ import annotations

from typing import Any

from brickscope.analysis._host import step_walls
from brickscope.analysis._intervals import concat, union_ns
from brickscope.analysis._model import Balance, LaneStats, StepStats, Throughput
from brickscope.analysis._table import CLOCK_CUDA_CODE, CLOCK_GPU_CODE, KIND_BRICK, KIND_KERNEL, KIND_STEP, Table


def devices(table: Table) -> tuple[LaneStats, ...]:
    """Each GPU with its streams, in device order."""
    be = table.backend
    gpu = _gpu_work(table)
    n_devices, n_streams = len(table.devices), len(table.streams)
    count = be.group_count(gpu["device"], n_devices)
    busy = union_ns(be, gpu["device"], gpu["start"], gpu["end"], n_devices)
    stream_count = be.group_count(gpu["stream"], n_streams)
    stream_busy = union_ns(be, gpu["stream"], gpu["start"], gpu["end"], n_streams)
    # a device's steps are those of the ranks that ran work on it
    ranks_of = [set() for _ in range(n_devices)]
    pairs = be.group_count(
        be.combine(gpu["device"], gpu["rank"], len(table.ranks)), max(1, n_devices * len(table.ranks))
    )
    for code, seen in enumerate(pairs):
        if seen:
            ranks_of[code // len(table.ranks)].add(code % len(table.ranks))
    idle = _idle(table, (gpu["device"], gpu["start"], gpu["end"]), busy, ranks_of)
    stream_ranks = [ranks_of[stream.device] for stream in table.streams]
    stream_idle = _idle(table, (gpu["stream"], gpu["start"], gpu["end"]), stream_busy, stream_ranks)
    return devices_of(table, (count, busy, idle), (stream_count, stream_busy, stream_idle))


def devices_of(
    table: Table, lanes: tuple[list[int], list[int], list[int]], streams: tuple[list[int], list[int], list[int]]
) -> tuple[LaneStats, ...]:
    """The devices section from (work count, busy ns, idle-in-steps ns) by device code and by stream code."""
    count, busy, idle = lanes
    stream_count, stream_busy, stream_idle = streams
    out = []
    for code, device in enumerate(table.devices):
        if not count[code]:
            continue
        streams = tuple(
            LaneStats(table.stream_label(s), stream_count[s], stream_busy[s], stream_idle[s])
            for s, stream in sorted(enumerate(table.streams), key=lambda item: item[1].handle)
            if stream.device == code and stream_count[s]
        )
        out.append(LaneStats(table.device_label(code), count[code], busy[code], idle[code], streams, device.model))
    return tuple(out)


def ranks(table: Table) -> tuple[LaneStats, ...]:
    """Each rank (the resource's ``brickscope.rank``, else its process)."""
    be = table.backend
    n_ranks = len(table.ranks)
    work = table.select(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    is_cuda = be.mask_in(work["clock"], (CLOCK_CUDA_CODE, CLOCK_GPU_CODE))
    gpu_rows = be.group_count(be.compress(work["rank"], is_cuda), n_ranks)
    # per rank, the clock of its work: CUDA when it has GPU-timed work
    rank_uses_cuda = be.lookup([bool(c) for c in gpu_rows], work["rank"], "bool")
    lanes = work.select(be.mask_equal(is_cuda, rank_uses_cuda))
    count = be.group_count(lanes["rank"], n_ranks)
    busy = union_ns(be, lanes["rank"], lanes["start"], lanes["end"], n_ranks)
    idle = _idle(table, (lanes["rank"], lanes["start"], lanes["end"]), busy, [{r} for r in range(n_ranks)])
    return ranks_of(table, count, busy, idle)


def ranks_of(table: Table, count: list[int], busy: list[int], idle: list[int]) -> tuple[LaneStats, ...]:
    """The ranks section from (work count, busy ns, idle-in-steps ns) by rank code."""
    n_ranks = len(table.ranks)
    return tuple(
        LaneStats(table.ranks[r], count[r], busy[r], idle[r])
        for r in sorted(range(n_ranks), key=lambda r: _rank_order(table.ranks[r]))
        if count[r]
    )


def balance(lanes: tuple[LaneStats, ...]) -> Balance:
    """Imbalance ratio (max - mean) / mean of busy time; the straggler is the busiest lane."""
    if not lanes:
        return Balance(0.0, 0.0, 0, None, {})
    busy = {lane.name: lane.busy_ns for lane in lanes}
    mean = sum(busy.values()) / len(busy)
    straggler = max(lanes, key=lambda lane: lane.busy_ns).name
    ratio = (busy[straggler] - mean) / mean if mean else 0.0
    return Balance(ratio, mean, busy[straggler], straggler if len(lanes) > 1 else None, busy)


def throughput(table: Table) -> Throughput:
    """Each step span: duration, wall time (with brickscope's work at its end, ``_host``),
    tokens (``brickscope.step.tokens``) and tokens/s over the wall time."""
    be = table.backend
    steps = table.select(be.mask_in(table["kind"], (KIND_STEP,)))
    walls = step_walls(table)
    rows = zip(*(be.to_list(steps[name]) for name in ("step", "rank", "duration", "tokens", "start")))
    ordered = sorted(rows, key=lambda r: (r[0], _rank_order(table.ranks[r[1]]), r[4]))
    stats = []
    for number, rank, duration, tokens, start in ordered:
        wall = walls[(number, rank, start)]
        rate = tokens / (wall / 1e9) if wall and tokens else 0.0
        stats.append(StepStats(None if number < 0 else number, table.ranks[rank], duration, tokens, rate, wall))
    total_ns = sum(s.duration_ns for s in stats)
    wall_ns = sum(s.wall_ns for s in stats)
    tokens = sum(s.tokens for s in stats)
    return Throughput(
        tuple(stats),
        total_ns / len(stats) if stats else 0.0,
        tokens,
        tokens / (wall_ns / 1e9) if wall_ns and tokens else 0.0,
        wall_ns / len(stats) if stats else 0.0,
    )


def _gpu_work(table: Table) -> Table:
    be = table.backend
    mask = be.mask_and(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)), be.mask_range(table["device"], 0, None))
    return table.select(mask)


def _idle(table: Table, work: tuple[Any, Any, Any], busy: list[int], ranks_of: list[set[int]]) -> list[int]:
    """Per group, the time inside its ranks' steps not covered by its work: |work u steps| - |work|."""
    be = table.backend
    steps = table.select(be.mask_in(table["kind"], (KIND_STEP,)))
    windows = []
    for group, group_ranks in enumerate(ranks_of):
        if not group_ranks:
            continue
        mask = be.mask_in(steps["rank"], sorted(group_ranks))
        starts = be.compress(steps["start"], mask)
        if be.size(starts):
            windows.append((be.full(be.size(starts), group, "int64"), starts, be.compress(steps["end"], mask)))
    if not windows:
        return [0] * len(busy)
    both = union_ns(be, *concat(be, work, *windows), len(busy))
    return [max(0, b - w) for b, w in zip(both, busy)]


def _rank_order(label: str) -> tuple[int, int, str]:
    return (0, int(label), "") if label.isdigit() else (1, 0, label)
