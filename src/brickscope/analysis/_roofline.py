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
    points = []
    for code, seen in enumerate(count):
        if not seen or not time_ns[code]:
            continue
        op = table.operations[code // lanes]
        device = code % lanes - 1
        model = table.devices[device].model if device >= 0 else "host"
        seconds = time_ns[code] / 1e9
        achieved_flops, achieved_bytes = flops[code] / seconds, nbytes[code] / seconds
        intensity = flops[code] / nbytes[code] if nbytes[code] and flops[code] else None
        found = find_peak(model if device >= 0 else "", peaks)
        bound = fraction = None
        peak_flops = peak_bytes = None
        if found is not None:
            peak = found[1]
            peak_flops, peak_bytes = peak.flops_per_second, peak.bytes_per_second
            if intensity is not None:
                bound = "memory" if intensity < peak_flops / peak_bytes else "compute"
                fraction = achieved_flops / min(peak_flops, intensity * peak_bytes)
            elif flops[code]:
                fraction = achieved_flops / peak_flops
            else:
                fraction = achieved_bytes / peak_bytes
        points.append(
            RooflinePoint(
                name=op.name,
                kind=op.kind,
                device=table.device_label(device) if device >= 0 else "host",
                model=model,
                flops=flops[code],
                bytes=nbytes[code],
                time_ns=time_ns[code],
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
