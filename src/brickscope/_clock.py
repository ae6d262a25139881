# SPDX-License-Identifier: Apache-2.0
"""The host clock: ``time.perf_counter_ns`` mapped onto Unix-epoch nanoseconds once.

perf_counter is monotonic and has the best resolution the platform offers; OTel
wants epoch nanoseconds. The offset is taken once at import, so every timestamp
brickscope produces costs one ``perf_counter_ns()`` call and one addition, and
host timestamps never jump when NTP steps the wall clock.

Example::

    from brickscope._clock import host_ns
    t = host_ns()   # ns since the Unix epoch
"""

from __future__ import annotations

import time

perf_counter_ns = time.perf_counter_ns


def _measure_epoch_offset_ns() -> int:
    """Offset from perf_counter to the epoch, from the tightest of a few paired reads."""
    best_gap, offset = None, 0
    for _ in range(5):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        if best_gap is None or after - before < best_gap:
            best_gap, offset = after - before, wall - (before + after) // 2
    return offset


#: Add to a ``perf_counter_ns()`` reading to get Unix-epoch nanoseconds.
EPOCH_OFFSET_NS = _measure_epoch_offset_ns()


def host_ns() -> int:
    """Now, in Unix-epoch nanoseconds, on the clock host-timed spans are stamped with.

    Public as ``brickscope.now_ns``: lay externally timed work (``record_gpu``) on the
    spans' timeline with it. Monotonic within a process (``time.perf_counter_ns`` plus an
    offset taken once at import), so it does not follow later steps of the wall clock.

    .. versionadded:: 0.2.0
    """
    return perf_counter_ns() + EPOCH_OFFSET_NS


now_ns = host_ns
