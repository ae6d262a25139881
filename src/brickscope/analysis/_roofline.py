# SPDX-License-Identifier: Apache-2.0
"""The roofline: achieved FLOP/s and bytes/s of each operation on each device against
that device's peaks (:mod:`._peaks`).

For an operation on a device, over its instances that carry ``flops`` or
``bytes``: time = sum of self times; achieved = flops / time and bytes / time;
arithmetic intensity AI = flops / bytes; ridge = peak FLOP/s / peak bytes/s;
memory-bound when AI < ridge; roof = min(peak FLOP/s, AI x peak bytes/s);
fraction of the roof = achieved FLOP/s / roof. Without bytes the roof is the
peak FLOP/s; without flops the fraction is achieved over peak bandwidth.
"""

from __future__ import annotations

from brickscope.analysis._model import RooflinePoint
from brickscope.analysis._peaks import Peak, find_peak
from brickscope.analysis._table import KIND_BRICK, KIND_KERNEL, Table


def roofline(table: Table, peaks: dict[str, Peak] | None = None) -> tuple[RooflinePoint, ...]:
    be = table.backend
    work = table.select(be.mask_in(table["kind"], (KIND_BRICK, KIND_KERNEL)))
    carrying = work.select(
        be.mask_not(be.mask_and(be.mask_range(work["bytes"], None, 1), be.mask_range(work["flops"], None, 1e-300)))
    )
    lanes = len(table.devices) + 1  # device codes shifted by one: 0 is "not on a GPU"
    codes = be.combine(carrying["op"], be.lookup(list(range(1, lanes)) + [0], carrying["device"], "int64"), lanes)
    n = len(table.operations) * lanes
    count = be.group_count(codes, n)
    flops = be.group_sum(codes, n, carrying["flops"])
    nbytes = be.group_sum(codes, n, carrying["bytes"])
    time_ns = be.group_sum(codes, n, carrying["self"])
    groups = {
        (code // lanes, code % lanes - 1): (flops[code], nbytes[code], time_ns[code])
        for code, seen in enumerate(count)
        if seen
    }
    return points_of(table, groups, peaks)


def points_of(
    table: Table, groups: dict[tuple[int, int], tuple[float, int, int]], peaks: dict[str, Peak] | None
) -> tuple[RooflinePoint, ...]:
    """The section from sums per (op code, device code or -1 off the GPU): flops, bytes and self
    time of the brick and kernel spans that carry flops or bytes."""
    points = []
    for (op_code, device), (group_flops, group_bytes, group_ns) in sorted(
        groups.items(), key=lambda g: (g[0][0], g[0][1] + 1)
    ):
        if not group_ns:
            continue
        op = table.operations[op_code]
        model = table.devices[device].model if device >= 0 else "host"
        seconds = group_ns / 1e9
        achieved_flops, achieved_bytes = group_flops / seconds, group_bytes / seconds
        intensity = group_flops / group_bytes if group_bytes and group_flops else None
        found = find_peak(model if device >= 0 else "", peaks)
        bound = fraction = None
        peak_flops = peak_bytes = None
        if found is not None:
            peak = found[1]
            peak_flops, peak_bytes = peak.flops_per_second, peak.bytes_per_second
            if intensity is not None:
                bound = "memory" if intensity < peak_flops / peak_bytes else "compute"
                fraction = achieved_flops / min(peak_flops, intensity * peak_bytes)
            elif group_flops:
                fraction = achieved_flops / peak_flops
            else:
                fraction = achieved_bytes / peak_bytes
        points.append(
            RooflinePoint(
                name=op.name,
                kind=op.kind,
                device=table.device_label(device) if device >= 0 else "host",
                model=model,
                flops=group_flops,
                bytes=group_bytes,
                time_ns=group_ns,
                flops_per_second=achieved_flops,
                bytes_per_second=achieved_bytes,
                arithmetic_intensity=intensity,
                peak_flops_per_second=peak_flops,
                peak_bytes_per_second=peak_bytes,
                bound=bound,
                fraction_of_roof=fraction,
            )
        )
    points.sort(key=lambda p: (p.kind != "brick", -p.time_ns, p.name, p.device))
    return tuple(points)
