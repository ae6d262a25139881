# SPDX-License-Identifier: Apache-2.0
"""Real readings of the machine's clocks, for the ClockSnapshot that opens every trace.

Example::

    for clock_id, timestamp in clock_readings():
        snapshot.clocks.add(clock_id=clock_id, timestamp=timestamp)

The trace processor relates every clock of a trace to its trace time through
ClockSnapshots. Ours declare ``CLOCK_REALTIME`` the trace time, but the trace
processor also bridges BOOTTIME (the default clock of a protobuf trace) to it,
and reports ``clock_sync_unrelatable_clock_domains`` when no snapshot relates
the two. Perfetto's tracing service snapshots BOOTTIME, REALTIME_COARSE,
MONOTONIC_COARSE, REALTIME, MONOTONIC and MONOTONIC_RAW, read back to back
(``base::CaptureClockSnapshots``); this does the same. Where the OS has no
BOOTTIME (macOS, Windows) the wall clock stands in for BOOTTIME and MONOTONIC,
as the tracing service does there.
"""

from __future__ import annotations

import sys
import time

from ._schema import pb

# (Perfetto builtin clock, POSIX clock id), in the tracing service's order.
# REALTIME_COARSE and MONOTONIC_COARSE are Linux ids 5 and 6 (the time module has no names).
_LINUX = (
    (pb.BUILTIN_CLOCK_BOOTTIME, getattr(time, "CLOCK_BOOTTIME", 7)),
    (pb.BUILTIN_CLOCK_REALTIME_COARSE, 5),
    (pb.BUILTIN_CLOCK_MONOTONIC_COARSE, 6),
    (pb.BUILTIN_CLOCK_REALTIME, time.CLOCK_REALTIME),
    (pb.BUILTIN_CLOCK_MONOTONIC, time.CLOCK_MONOTONIC),
    (pb.BUILTIN_CLOCK_MONOTONIC_RAW, getattr(time, "CLOCK_MONOTONIC_RAW", 4)),
)


def clock_readings() -> list[tuple[int, int]]:
    """``(builtin clock id, nanoseconds)`` of each clock, read as close together as Python can."""
    if sys.platform.startswith("linux"):
        readings = []
        for builtin, posix in _LINUX:
            try:
                readings.append((builtin, time.clock_gettime_ns(posix)))
            except OSError:  # a kernel without that clock: the others still relate
                continue
        return readings
    wall = time.time_ns()
    return [(pb.BUILTIN_CLOCK_BOOTTIME, wall), (pb.BUILTIN_CLOCK_REALTIME, wall), (pb.BUILTIN_CLOCK_MONOTONIC, wall)]
